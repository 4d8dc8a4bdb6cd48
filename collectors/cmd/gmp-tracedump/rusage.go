package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// peakRSSKiB is this process's peak resident set size: VmHWM from /proc/self/status.
// ru_maxrss is not used: Linux carries it over exec from the forking parent's memory, so a
// child of a 300 MiB Python process reported 318 MiB for a 3 MiB read. -1: /proc unreadable.
func peakRSSKiB() int64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		if v, ok := statusKiB(b, "VmHWM:"); ok {
			return v
		}
	}
	return -1
}

// statusKiB returns the value of a "Name:   1234 kB" line of /proc/PID/status.
func statusKiB(status []byte, name string) (int64, bool) {
	for _, line := range bytes.Split(status, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte(name)); ok {
			f := bytes.Fields(rest)
			if len(f) == 2 && string(f[1]) == "kB" {
				v, err := strconv.ParseInt(string(f[0]), 10, 64)
				return v, err == nil
			}
		}
	}
	return 0, false
}
