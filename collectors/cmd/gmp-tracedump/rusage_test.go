package main

import "testing"

func TestStatusKiB(t *testing.T) {
	status := []byte("Name:\tgmp-tracedump\nVmPeak:\t  1262224 kB\nVmHWM:\t    3188 kB\nVmRSS:\t    3100 kB\n")
	if v, ok := statusKiB(status, "VmHWM:"); !ok || v != 3188 {
		t.Errorf("VmHWM = %d, %v; want 3188", v, ok)
	}
	if _, ok := statusKiB(status, "VmSwap:"); ok {
		t.Error("a missing line was found")
	}
	if _, ok := statusKiB([]byte("VmHWM:\tlots kB\n"), "VmHWM:"); ok {
		t.Error("a garbled value was accepted")
	}
	if v := peakRSSKiB(); v <= 0 {
		t.Errorf("peakRSSKiB() = %d on this machine", v)
	}
}
