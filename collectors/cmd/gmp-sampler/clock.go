package main

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// monoNs reads CLOCK_MONOTONIC, the clock of the Go execution trace (ticks = the runtime's
// nanotime/64 on Linux) and of every time in a bundle, as an absolute value: no offset to
// estimate. It is a real clock_gettime system call through x/sys (which does not use the
// vDSO); the runtime's vDSO read is reachable only through an unsupported //go:linkname to
// runtime.nanotime, which this used before. Measured here: ≈0.25–0.33 µs a read against
// ≈0.03 µs for the vDSO (BenchmarkMonoNs, BenchmarkTimeSince); the loop reads the clock
// 2 + 2×cgroups times a tick. Own CPU at 997 µs under SCHED_FIFO, 10 s runs alternated:
// 3.9–5.2 % (mean 4.7) against 4.1–5.2 % (mean 4.5) with the vDSO read: within the noise.
//
// It also keeps the rows' read brackets tight. The sampling goroutine keeps its P through
// the raw sleep, so sysmon asks it to yield about every 20 ms; the request is honoured at
// the next function prologue that checks the stack, and a locked goroutine then waits for
// another thread to run the scheduler. runtime.nanotime (and RawSyscall) have no such
// check, so the yield used to fall inside the first pread, between t0 and t1: 1 row in 20
// (every 19.94 ms) had a 30–900 µs read_ns, read p99 65–137 µs. unix.ClockGettime does
// check, so the yield now happens at the wake-up read, before t0: read p99 9–11 µs and
// 12–25 such rows per 10 s; the delay shows in lateness p99 instead (140–195 µs, was
// 92–136 µs), which costs no data: every row carries its own measured time.
func monoNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail: valid clock, valid pointer
	return ts.Nano()
}

// sleepUntil sleeps to an absolute CLOCK_MONOTONIC deadline with clock_nanosleep
// (TIMER_ABSTIME: no drift, and lateness is measurable against the deadline).
//
// It is a raw syscall that keeps this thread's P. Measured here at 997 µs: the ordinary
// syscall path (entersyscall) cost ≈9.5 % of a core and releasing the P for the sleep
// (entersyscallblock) ≈10.5 %, both from the scheduler and sysmon reacting to every P
// hand-off; the raw call costs ≈4.5 %, close to the ≈3.3 % a C loop spends on 1 kHz
// wake-ups alone on this VM.
func sleepUntil(ts *unix.Timespec) {
	for {
		_, _, errno := unix.RawSyscall6(unix.SYS_CLOCK_NANOSLEEP, unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME,
			uintptr(unsafe.Pointer(ts)), 0, 0, 0)
		if errno != unix.EINTR {
			return
		}
	}
}

// cpuTimeNs is the CPU time (user + system) of the whole process so far; 0 if unknown.
func cpuTimeNs() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
