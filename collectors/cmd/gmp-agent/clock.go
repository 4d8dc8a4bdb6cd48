package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// monoNow is CLOCK_MONOTONIC, the clock of every time in a bundle (the sampler's rows and
// the Go trace use it too).
func monoNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}
