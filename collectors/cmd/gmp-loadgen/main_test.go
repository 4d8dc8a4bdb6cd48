package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gmpanalysis/gmpanalysis/collectors/demoapp"
	vegeta "github.com/tsenart/vegeta/v12/lib"
	"golang.org/x/sys/unix"
)

// TestClockIsClockMonotonic: times mapped through the clock agree with clock_gettime
// within the width of a bracketing pair of reads.
func TestClockIsClockMonotonic(t *testing.T) {
	c := newClock()
	for i := 0; i < 5; i++ {
		time.Sleep(2 * time.Millisecond)
		var a, b unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		got := c.ns(time.Now())
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		const slack = 50_000 // ns: the offset's half-width and scheduling noise
		if got < a.Nano()-slack || got > b.Nano()+slack {
			t.Fatalf("clock gave %d, outside [%d, %d] ± %d ns", got, a.Nano(), b.Nano(), slack)
		}
	}
}

func TestOffsets(t *testing.T) {
	offs, err := offsets("constant", 100, time.Second, 1000, 1)
	if err != nil || len(offs) != 100 || offs[0] != 0 || offs[99] != 990*time.Millisecond {
		t.Fatalf("constant 100/s for 1s: %d offsets, first %v last %v, %v", len(offs), offs[0], offs[len(offs)-1], err)
	}
	p1, _ := offsets("poisson", 1000, time.Second, 50, 7)
	p2, _ := offsets("poisson", 1000, time.Second, 50, 7)
	if len(p1) != 50 || len(p2) != 50 {
		t.Fatalf("max-requests bound: %d, %d offsets", len(p1), len(p2))
	}
	for i := range p1 {
		if p1[i] != p2[i] || (i > 0 && p1[i] < p1[i-1]) {
			t.Fatalf("poisson offsets not seeded or not increasing at %d: %v", i, p1[:i+1])
		}
	}
	if _, err := offsets("bursty", 1, time.Second, 1, 1); err == nil {
		t.Error("unknown arrivals accepted")
	}
}

// TestRequestsFile: a new file gets the five-column header and rows with the service's CPU
// (empty where it sent none or something that is not a count); a file begun by an older
// generator without cpu_ns is appended to in its own four columns.
func TestRequestsFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "requests.csv")
	f, withCPU, err := openOut(p)
	if err != nil || !withCPU {
		t.Fatalf("new file: withCPU %v, err %v", withCPU, err)
	}
	res := &vegeta.Result{Headers: http.Header{}}
	res.Headers.Set(demoapp.CPUHeader, "30125000")
	row := appendRow(nil, 1, 2, 3, 200, res, withCPU)
	res.Headers.Set(demoapp.CPUHeader, "-5")
	row = appendRow(row, 4, 5, 6, 0, res, withCPU)
	row = appendRow(row, 7, 8, 9, 200, &vegeta.Result{}, withCPU)
	if _, err := f.Write(row); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, withCPU, _ = openOut(p); !withCPU { // reopened: the header is already there
		t.Fatal("reopened file: withCPU false")
	}
	got, _ := os.ReadFile(p)
	want := "sched_ns,start_ns,end_ns,status,cpu_ns\n1,2,3,200,30125000\n4,5,6,0,\n7,8,9,200,\n"
	if string(got) != want {
		t.Fatalf("file:\n%s\nwant:\n%s", got, want)
	}

	old := filepath.Join(dir, "old.csv")
	_ = os.WriteFile(old, []byte("sched_ns,start_ns,end_ns,status\n1,2,3,200\n"), 0o644)
	if _, withCPU, err = openOut(old); err != nil || withCPU {
		t.Fatalf("old file: withCPU %v, err %v", withCPU, err)
	}
	if got := string(appendRow(nil, 4, 5, 6, 200, res, withCPU)); got != "4,5,6,200\n" {
		t.Fatalf("old file row %q", got)
	}
}
