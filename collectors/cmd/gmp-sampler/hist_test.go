package main

import "testing"

func TestLatencyHistEdges(t *testing.T) {
	h := new(latencyHist)
	if q := h.quantile(0.5); q != 0 {
		t.Errorf("empty: %d", q)
	}
	for i := int64(0); i < 100; i++ {
		h.add(i*1000 + 500)
	}
	// quantiles are the upper edges of 1 µs buckets
	if p50, p99 := h.quantile(0.5), h.quantile(0.99); p50 != 50_000 || p99 != 99_000 || h.max != 99_500 {
		t.Errorf("p50 %d p99 %d max %d", p50, p99, h.max)
	}
	h.add(-5)            // early: bucket 0
	h.add(1_000_000_000) // 1 s: the last bucket
	if h.buckets[0] != 2 || h.buckets[len(h.buckets)-1] != 1 || h.max != 1_000_000_000 || h.n != 102 {
		t.Errorf("bucket 0 %d, last %d, max %d, n %d", h.buckets[0], h.buckets[len(h.buckets)-1], h.max, h.n)
	}
	if q := h.quantile(1); q != int64(len(h.buckets))*1000 {
		t.Errorf("p100 %d", q)
	}
}

func TestLatencyQuantile(t *testing.T) {
	var h latencyHist
	for i := 0; i < 99; i++ {
		h.add(10_500) // 10.5 µs -> bucket 10
	}
	h.add(5_000_000)
	if got := h.quantile(0.5); got != 11_000 {
		t.Fatalf("p50 %d", got)
	}
	if got := h.quantile(0.99); got != 11_000 {
		t.Fatalf("p99 %d", got)
	}
	if h.max != 5_000_000 {
		t.Fatalf("max %d", h.max)
	}
}
