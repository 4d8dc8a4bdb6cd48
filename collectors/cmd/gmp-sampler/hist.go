package main

// latencyHist keeps wake-up lateness at 1 µs resolution without allocating in the loop.
type latencyHist struct {
	buckets [200001]uint32 // 0 .. 200 ms in µs; the last bucket holds everything beyond
	n       uint64
	max     int64
}

func (h *latencyHist) add(ns int64) {
	if ns < 0 {
		ns = 0
	}
	us := ns / 1000
	if us >= int64(len(h.buckets)-1) {
		us = int64(len(h.buckets) - 1)
	}
	h.buckets[us]++
	h.n++
	if ns > h.max {
		h.max = ns
	}
}

// quantile returns the upper edge (ns) of the bucket holding quantile q.
func (h *latencyHist) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	want := uint64(q*float64(h.n-1)) + 1
	var acc uint64
	for i, c := range h.buckets {
		acc += uint64(c)
		if acc >= want {
			return int64(i+1) * 1000
		}
	}
	return h.max
}
