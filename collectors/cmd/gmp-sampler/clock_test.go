package main

import (
	"testing"
	"time"
)

var clockSink int64

// BenchmarkMonoNs is the sampler's clock read (clock_gettime as a system call).
func BenchmarkMonoNs(b *testing.B) {
	for b.Loop() {
		clockSink += monoNs()
	}
}

// BenchmarkTimeSince costs one runtime nanotime: the vDSO CLOCK_MONOTONIC read that
// monoNs would be with a //go:linkname to runtime.nanotime.
func BenchmarkTimeSince(b *testing.B) {
	t0 := time.Now()
	for b.Loop() {
		clockSink += int64(time.Since(t0))
	}
}

// TestMonoNsIsTheRuntimeClock: monoNs and the runtime's monotonic clock (behind
// time.Since) advance together, and monoNs never goes back.
func TestMonoNsIsTheRuntimeClock(t *testing.T) {
	t0, m0 := time.Now(), monoNs()
	prev := m0
	for i := 0; i < 1000; i++ {
		m := monoNs()
		if m < prev {
			t.Fatalf("monoNs went back: %d after %d", m, prev)
		}
		prev = m
	}
	time.Sleep(20 * time.Millisecond)
	dm, dt := monoNs()-m0, time.Since(t0).Nanoseconds()
	if diff := dm - dt; diff < -1_000_000 || diff > 1_000_000 {
		t.Errorf("monoNs advanced %d ns while time.Since advanced %d ns", dm, dt)
	}
}
