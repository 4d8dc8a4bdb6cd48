package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// v2Tree is a cgroup v2 mount holding cgroup g with the counters and limits of
// tests/data/cgroup/v2/set (ordinary files: pread at offset 0 rereads them like the
// kernel's). It returns the root.
func v2Tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	src := filepath.Join("..", "..", "..", "tests", "data", "cgroup", "v2", "set")
	if err := os.Mkdir(filepath.Join(root, "g"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cpu.stat", "cpu.max", "cpu.max.burst"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "g", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// the fixture's counters as a row writes them, after t_ns and read_ns
const fixtureCounters = "3012345,61,52,2636400,0,0"

// newTestSampler opens the specs on a fixture tree as main does, without the thread setup
// (policy, timer slack, GC) that would outlive the test.
func newTestSampler(t *testing.T, args ...string) (s *sampler, sum *summary, out, root string) {
	t.Helper()
	root = v2Tree(t)
	s, sum, out = samplerOn(t, root, args...)
	return s, sum, out, root
}

// samplerOn is newTestSampler on the cgroup mount at root.
func samplerOn(t *testing.T, root string, args ...string) (s *sampler, sum *summary, out string) {
	t.Helper()
	out = filepath.Join(t.TempDir(), "out.csv")
	c := parseConfig(t, append([]string{"--root", root, "--out", out}, args...)...)
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	targets, err := openTargets(&log, c.root, c.cgroups, c.limitsOut != "")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(log.String(), "gmp-sampler: sampling "); got != len(targets) {
		t.Errorf("log %q: %d sampling lines for %d targets", log.String(), got, len(targets))
	}
	w, _, err := openOutput(c.out, len(targets) > 1, false)
	if err != nil {
		t.Fatal(err)
	}
	sm := newSummary(c, targets, nil)
	sum = &sm
	var ls *limitsSeries
	if c.limitsOut != "" {
		if ls, err = openLimitsSeries(c.limitsOut, c.limitsEvery.Nanoseconds(), sum.LimitsSeries); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		w.Close()
		for _, tg := range targets {
			tg.close()
		}
		if ls != nil {
			ls.close()
		}
	})
	return newSampler(c, targets, w, nil, ls, new(atomic.Int32), sum), sum, out
}

func readRows(t *testing.T, path string) (header string, rows [][]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for _, l := range lines[1:] {
		rows = append(rows, strings.Split(l, ","))
	}
	return lines[0], rows
}

func TestSamplerRunsOnTheGrid(t *testing.T) {
	s, sum, out, _ := newTestSampler(t, "--cgroup", "g", "--interval", "1ms")
	s.begin(30 * time.Millisecond)
	s.run()
	s.finish()
	if sum.StopReason != "duration" || sum.ReadErrors != 0 || s.exitCode() != 0 {
		t.Errorf("stop %q, read errors %d, exit %d", sum.StopReason, sum.ReadErrors, s.exitCode())
	}
	// every deadline before the end is sampled or counted missed (skipping may overshoot it)
	if sum.Ticks == 0 || sum.Ticks+sum.Missed < 30 || sum.Rows != sum.Ticks {
		t.Errorf("ticks %d, missed %d, rows %d over 30 deadlines", sum.Ticks, sum.Missed, sum.Rows)
	}
	// the last deadline is start + 29 ms; the loop ends without sleeping to the 30th
	if sum.MonoEndNs < sum.MonoStartNs+29_000_000 || sum.LateP99Ns < sum.LateP50Ns || sum.ReadP50Ns <= 0 {
		t.Errorf("summary %+v", *sum)
	}
	hdr, rows := readRows(t, out)
	if hdr != csvHeader {
		t.Errorf("header %q", hdr)
	}
	if uint64(len(rows)) != sum.Rows {
		t.Fatalf("%d rows in the file, %d counted", len(rows), sum.Rows)
	}
	prev := sum.MonoStartNs
	for i, r := range rows {
		tNs, _ := strconv.ParseInt(r[0], 10, 64)
		readNs, _ := strconv.ParseInt(r[1], 10, 64)
		if len(r) != 8 || strings.Join(r[2:], ",") != fixtureCounters || tNs < prev || tNs > sum.MonoEndNs || readNs <= 0 {
			t.Fatalf("row %d: %q", i, r)
		}
		prev = tNs
	}
}

func TestSamplerSeveralTargets(t *testing.T) {
	s, sum, out, _ := newTestSampler(t, "--cgroup", "a=g", "--cgroup", "b=g", "--interval", "1ms")
	s.begin(5 * time.Millisecond)
	s.run()
	s.finish()
	hdr, rows := readRows(t, out)
	if hdr != csvHeader+",cgroup" || len(rows) == 0 || uint64(len(rows)) != 2*sum.Ticks {
		t.Fatalf("header %q, %d rows for %d ticks", hdr, len(rows), sum.Ticks)
	}
	for i, r := range rows {
		if want := []string{"a", "b"}[i%2]; len(r) != 9 || r[8] != want {
			t.Fatalf("row %d: %q, want cgroup %s", i, r, want)
		}
	}
}

func TestSamplerStopsOnBadData(t *testing.T) {
	s, sum, out, root := newTestSampler(t, "--cgroup", "g", "--interval", "1ms")
	// the same inode rewritten: the held fd reads the new text
	if err := os.WriteFile(filepath.Join(root, "g", "cpu.stat"), []byte("usage_usec x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.begin(time.Second)
	s.run()
	s.finish()
	if !strings.HasPrefix(sum.StopReason, "bad cgroup data: ") || !strings.Contains(sum.StopReason, "cpu.stat") ||
		sum.ReadErrors != 1 || sum.Rows != 0 || s.exitCode() != 4 {
		t.Errorf("stop %q, read errors %d, rows %d, exit %d", sum.StopReason, sum.ReadErrors, sum.Rows, s.exitCode())
	}
	// the same error as facts, for the collector
	if e := sum.Error; e == nil || e.Kind != "format" || e.Line != 1 || e.Path != filepath.Join(root, "g", "cpu.stat") {
		t.Errorf("error facts %+v", e)
	}
	if _, rows := readRows(t, out); len(rows) != 0 {
		t.Errorf("rows written: %q", rows)
	}
}

func TestSamplerStopsOnSignal(t *testing.T) {
	s, sum, _, _ := newTestSampler(t, "--cgroup", "g", "--interval", "1ms")
	s.stop.Store(int32(syscall.SIGTERM))
	s.begin(0)
	s.run()
	s.finish()
	if sum.StopReason != "terminated" || sum.Ticks != 0 || s.exitCode() != 0 {
		t.Errorf("stop %q, ticks %d, exit %d", sum.StopReason, sum.Ticks, s.exitCode())
	}
}

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		bad    bool
		errors uint64
		want   int
	}{{false, 0, 0}, {false, 1, 3}, {true, 1, 4}} {
		s := &sampler{sum: &summary{ReadErrors: c.errors}, badData: c.bad}
		if got := s.exitCode(); got != c.want {
			t.Errorf("bad data %v, read errors %d: exit %d, want %d", c.bad, c.errors, got, c.want)
		}
	}
}

// TestRunAllocatesNothing: the loop, flushes included, allocates nothing (GC is off in the
// sampler, so every allocation would stay).
func TestRunAllocatesNothing(t *testing.T) {
	s, sum, _, _ := newTestSampler(t, "--cgroup", "g", "--interval", "1ms", "--flush", "0")
	allocs := testing.AllocsPerRun(5, func() {
		s.begin(3 * time.Millisecond)
		s.run()
	})
	if allocs != 0 || sum.Rows == 0 {
		t.Errorf("%v allocations per 3 ms run (%d rows)", allocs, sum.Rows)
	}
}

// A collector exec'd through the API server ends the run by writing to stdin or closing it:
// the loop stops at the next tick, as for a signal, with exit 0 and its rows written.
func TestStdinEndsTheRun(t *testing.T) {
	for _, how := range []string{"line", "close"} {
		t.Run(how, func(t *testing.T) {
			s, sum, out, _ := newTestSampler(t, "--cgroup", "g", "--interval", "1ms")
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pr.Close()
			watchStdin(s.stop, pr)
			s.begin(time.Minute)
			done := make(chan struct{})
			go func() { s.run(); close(done) }()
			time.Sleep(50 * time.Millisecond)
			if how == "line" {
				_, err = pw.Write([]byte("stop\n"))
			} else {
				err = pw.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			asked := monoNs()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the run did not end 5 s after stdin said so")
			}
			s.finish()
			pw.Close()
			if sum.StopReason != "stdin" || s.exitCode() != 0 || sum.Rows == 0 {
				t.Errorf("stop %q, exit %d, rows %d", sum.StopReason, s.exitCode(), sum.Rows)
			}
			if sum.MonoEndNs > asked+int64(time.Second) {
				t.Errorf("last row %d ms after stdin ended the run", (sum.MonoEndNs-asked)/1e6)
			}
			if _, rows := readRows(t, out); uint64(len(rows)) != sum.Rows {
				t.Errorf("%d rows in the file, %d counted", len(rows), sum.Rows)
			}
		})
	}
}
