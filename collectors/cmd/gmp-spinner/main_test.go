package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGapDetector(t *testing.T) {
	d := gapDetector{limit: 1000}
	var got []gap
	// 1000 apart is not a gap, 1001 is; the first read starts nothing
	for _, now := range []int64{5000, 6000, 6500, 7501, 7600, 50_000, 50_001} {
		if s, e, ok := d.observe(now); ok {
			got = append(got, gap{0, s, e})
		}
	}
	want := []gap{{0, 6500, 7501}, {0, 7600, 50_000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("gaps %v, want %v", got, want)
	}
}

// fakeClock returns the reads in turn and sets stop at the last one.
func fakeClock(stop *atomic.Bool, reads ...int64) func() int64 {
	i := 0
	return func() int64 {
		v := reads[i]
		i++
		if i == len(reads) {
			stop.Store(true)
		}
		return v
	}
}

func TestSpinSendsGapsWithoutBlocking(t *testing.T) {
	var stop atomic.Bool
	var dropped atomic.Uint64
	out := make(chan gap, 2)
	spin(3, fakeClock(&stop, 100, 200, 2000, 2100, 9000, 9100, 20_000), 1000, &stop, out, &dropped)
	// three gaps, room for two: the third is dropped, never waited for
	if len(out) != 2 || dropped.Load() != 1 {
		t.Fatalf("%d queued, %d dropped", len(out), dropped.Load())
	}
	if g := <-out; g != (gap{3, 200, 2000}) {
		t.Errorf("first gap %v", g)
	}
	if g := <-out; g != (gap{3, 2100, 9000}) {
		t.Errorf("second gap %v", g)
	}
}

func TestSpinAllocatesNothing(t *testing.T) {
	out := make(chan gap, 1)
	var dropped atomic.Uint64
	if n := testing.AllocsPerRun(10, func() {
		var stop atomic.Bool
		spin(0, fakeClock(&stop, 1, 5000, 5001, 9000, 9001, 20_000), 1000, &stop, out, &dropped)
	}); n > 1 { // the fake clock's closure
		t.Errorf("%v allocations per run", n)
	}
}

// syncBuffer is a bytes.Buffer safe for the writer goroutine and the test.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestWriterFlushesWholeLines(t *testing.T) {
	in := []chan gap{make(chan gap, 8), make(chan gap, 8)}
	done := make(chan struct{})
	var w syncBuffer
	var stop atomic.Bool
	type result struct {
		n   uint64
		err error
	}
	res := make(chan result, 1)
	go func() {
		n, err := writer(&w, in, done, 5*time.Millisecond, &stop)
		res <- result{n, err}
	}()
	in[0] <- gap{0, 10, 2000}
	in[1] <- gap{1, 11, 2001}
	// written by a periodic flush, before the end
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(w.String(), "\n") < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	in[0] <- gap{0, 3000, 9000}
	close(done)
	r := <-res
	want := `{"gap":{"thread":0,"start_ns":10,"end_ns":2000}}` + "\n" +
		`{"gap":{"thread":1,"start_ns":11,"end_ns":2001}}` + "\n" +
		`{"gap":{"thread":0,"start_ns":3000,"end_ns":9000}}` + "\n"
	if r.err != nil || r.n != 3 || w.String() != want || w.writes != 2 {
		t.Errorf("n %d err %v, %d writes of %q", r.n, r.err, w.writes, w.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriterStopsOnWriteError(t *testing.T) {
	in := []chan gap{make(chan gap, 1)}
	in[0] <- gap{0, 1, 5000}
	done := make(chan struct{})
	close(done)
	var stop atomic.Bool
	if _, err := writer(failWriter{}, in, done, time.Hour, &stop); err == nil || !stop.Load() {
		t.Errorf("err %v, stop %v", err, stop.Load())
	}
}

func TestLines(t *testing.T) {
	for _, l := range [][]byte{
		appendHeader(nil, 42, 2, 1_000_000, 123),
		appendGap(nil, gap{1, 5, 6}),
		appendDone(nil, 999, 7, 0),
	} {
		var v map[string]map[string]int64
		if err := json.Unmarshal(l, &v); err != nil || len(v) != 1 || !bytes.HasSuffix(l, []byte("}}\n")) {
			t.Errorf("%q: %v", l, err)
		}
	}
	if got := string(appendHeader(nil, 42, 2, 1_000_000, 123)); got != `{"spinner":{"pid":42,"threads":2,"gap_ns":1000000,"start_ns":123}}`+"\n" {
		t.Errorf("header %q", got)
	}
	if got := string(appendDone(nil, 999, 7, 1)); got != `{"done":{"end_ns":999,"gaps":7,"dropped":1}}`+"\n" {
		t.Errorf("done %q", got)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []config{{threads: 0, gap: time.Millisecond}, {threads: 1, gap: time.Microsecond},
		{threads: 1, gap: time.Millisecond, duration: -1}} {
		if err := c.validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (&config{threads: 2, gap: time.Millisecond}).validate(); err != nil {
		t.Error(err)
	}
}

// TestRunBriefly: a real 20 ms run on one thread writes the header, then the done line
// whose gap count matches the gap lines.
func TestRunBriefly(t *testing.T) {
	var stop atomic.Bool
	time.AfterFunc(20*time.Millisecond, func() { stop.Store(true) })
	var w syncBuffer
	if err := run(&config{threads: 1, gap: time.Millisecond}, &w, &stop); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
	var first, last map[string]map[string]int64
	if json.Unmarshal([]byte(lines[0]), &first) != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil {
		t.Fatalf("lines %q", lines)
	}
	h, d := first["spinner"], last["done"]
	if h["threads"] != 1 || h["gap_ns"] != 1_000_000 || d["end_ns"]-h["start_ns"] < 20_000_000 ||
		d["gaps"] != int64(len(lines)-2) || d["dropped"] != 0 {
		t.Errorf("header %v, done %v, %d lines", h, d, len(lines))
	}
}
