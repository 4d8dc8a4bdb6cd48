package main

import (
	"testing"
	"time"

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
