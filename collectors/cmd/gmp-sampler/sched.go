package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"

	"golang.org/x/sys/unix"
)

// prepareSamplingThread readies the calling goroutine, which must be the one that runs the
// loop, and the process for it; it returns the scheduling policy obtained and, when
// --fifo was refused, why (also told on stderr).
func prepareSamplingThread(fifo bool, prio int) (policy, policyErr string) {
	policy = "SCHED_OTHER"
	// The sampling loop runs on one locked OS thread: timer slack is a per-thread attribute.
	runtime.LockOSThread()
	if fifo {
		if err := setFIFOAllThreads(prio); err != nil {
			// EPERM here usually means RT group scheduling gives our cgroup no RT budget.
			policyErr = fmt.Sprintf("SCHED_FIFO refused (%v): stayed SCHED_OTHER; run as root from the root cpu cgroup", err)
			fmt.Fprintln(os.Stderr, "gmp-sampler: "+policyErr)
		} else {
			policy = "SCHED_FIFO:" + strconv.Itoa(prio)
		}
	}
	// Default timer slack is 50 µs; 1 ns lets clock_nanosleep wake at the deadline.
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	// The loop allocates nothing; without GC no stop-the-world can delay a read.
	debug.SetGCPercent(-1)
	return policy, policyErr
}

// setFIFOAllThreads puts every thread of the process under SCHED_FIFO; threads the
// runtime creates later inherit the policy from their creator. The sampling goroutine
// holds its P through the raw sleep, so sysmon preempts it every 10 ms, and a locked
// goroutine resumes only after another runtime thread has run the scheduler: under
// SCHED_OTHER that thread queued behind the load and delayed samples by up to 9.6 ms.
func setFIFOAllThreads(prio int) error {
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 1 /* SCHED_FIFO */, Priority: uint32(prio)}
	for _, t := range tids {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
			return err
		}
	}
	return nil
}
