// gmp-sampler reads the CFS bandwidth counters of one or more cgroups at a fixed interval
// and appends them, one CSV row per read, to a file or stdout.
//
// Each row: t_ns (CLOCK_MONOTONIC midpoint of the cpu.stat read), read_ns (its duration),
// usage_us, nr_periods, nr_throttled, throttled_us, nr_bursts, burst_us
// [, psi_some_us, psi_full_us, local_throttled_us] [, cgroup]. Units are normalised to µs
// whatever the cgroup version (v1 reports ns). The three cgroup v2 columns are there when
// a target has cpu.pressure or cpu.stat.local at the start (v2; never on v1 or where the
// kernel has neither, so those rows stay as they were): cpu.pressure's "some" and "full"
// total= (µs of wall time stalled for CPU; "full" from 5.13) and cpu.stat.local's
// throttled_usec (6.6+: the cgroup's run queues throttled by its own quota or an
// ancestor's, summed over CPUs), read right after cpu.stat. A target without one of the
// files (or a cpu.pressure without its full line) writes an empty field there, never 0.
// The cgroup column (the target's name) is there with several targets. Appending to an
// existing file keeps the columns of its header. Rows are written with write(2) at least
// every --flush interval and the file only ever grows, so a sampler killed at any moment
// leaves a readable file holding all but the last few rows.
//
// With --limits-out, the CFS limits of every target (period, quota, burst: rewritten in
// place by a Kubernetes in-place resize) are reread about every --limits-every, after the
// tick's cpu.stat reads, and written as a row at each cgroup's first read and at every
// change: t_ns,prev_ns,cgroup,period_us,quota_us,burst_us (limits.go).
//
// With --summary, each entry of the summary's cgroups holds every key of the first and
// the last row's reads, those the rows leave out included (nice_usec,
// core_sched.force_idle_usec, later kernels' keys): stat_first/stat_last (cpu.stat, the
// kernel's units), and where the target has the files stat_local_first/stat_local_last
// (cpu.stat.local) and pressure_first/pressure_last ({"some_total_us","full_total_us"}).
//
// Where the cgroup's files are and how they parse is internal/cgroup's. Exit status: 0 at
// the end of --duration, on a signal or (with --stop-on-stdin) at stdin's first byte or end, 2 when nothing could be sampled (bad arguments, no
// such cgroup, files that do not parse at the first read), 3 when a sampled cgroup went
// away (its files no longer read), 4 when a later read did not parse (the summary's
// stop_reason quotes the file and line; no row is written for it). With --summary, exits
// 2 and 4 carry the error as JSON facts (the summary's "error": kind, path, line, message;
// before the start, a {"error":{...}} line or a file holding only the error).
//
// The pieces: config.go (flags), cgroups.go (targets), row.go (CSV output), hoststat.go
// (/proc/stat), limits.go (the limits series), sched.go and clock.go (thread, policy, clock and sleep), loop.go (the
// sampling loop), summary.go (start line, closing report and summary).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

func main() {
	var cfg config
	cfg.register(flag.CommandLine)
	flag.Parse()
	if cfg.idle {
		waitForSignal()
		return
	}
	if err := cfg.validate(); err != nil {
		fail(&cfg, err)
	}
	targets, err := openTargets(os.Stderr, cfg.root, cfg.cgroups, cfg.limitsOut != "")
	if err != nil {
		fail(&cfg, err)
	}
	w, cols, err := openOutput(cfg.out, wantColumns(targets))
	if err != nil {
		fail(&cfg, err)
	}
	if w != os.Stdout {
		defer w.Close()
	}
	hs, err := startHostStat(cfg.hostStat, cfg.hostEvery)
	if err != nil {
		fail(&cfg, err)
	}
	if hs != nil {
		defer hs.close()
	}
	stop := notifyStop()
	if cfg.stopOnStdin {
		watchStdin(stop, os.Stdin)
	}

	sum := newSummary(&cfg, targets, hs)
	var ls *limitsSeries
	if cfg.limitsOut != "" {
		if ls, err = openLimitsSeries(cfg.limitsOut, cfg.limitsEvery.Nanoseconds(), sum.LimitsSeries); err != nil {
			fail(&cfg, err)
		}
		defer ls.close()
	}
	sum.Policy, sum.PolicyError = prepareSamplingThread(cfg.fifo, cfg.fifoPrio)
	s := newSampler(&cfg, targets, cols, w, hs, ls, stop, &sum)
	s.begin(cfg.duration)
	if cfg.summary == "stderr" {
		writeStart(os.Stderr, &sum)
	}
	s.run()
	s.finish()
	if err := writeReport(os.Stderr, &sum, cfg.interval, cfg.summary); err != nil {
		fatalf("summary: %v", err)
	}
	if code := s.exitCode(); code != 0 {
		os.Exit(code)
	}
}

// waitForSignal is --idle: it returns on SIGINT or SIGTERM.
func waitForSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
}

// notifyStop returns where the first SIGINT, SIGTERM or SIGPIPE is stored (its number; 0
// until then) instead of ending the process. With SIGPIPE notified, a write to a closed
// stdout pipe fails with EPIPE rather than killing the process, so the loop stops and the
// report is still written.
func notifyStop() *atomic.Int32 {
	var stop atomic.Int32
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	go func() {
		s := <-sigs
		stop.Store(int32(s.(syscall.Signal)))
	}()
	return &stop
}

// stopByStdin is what the stop store holds when stdin ended the run: signals are positive.
const stopByStdin = -1

// watchStdin ends the run (as a signal would) at the first byte read from r, its end or a
// failed read: a collector that exec'd the sampler through the API server writes a line or
// closes the stream when it has what it needs.
func watchStdin(stop *atomic.Int32, r io.Reader) {
	go func() {
		var b [1]byte
		_, _ = io.ReadFull(r, b[:])
		stop.CompareAndSwap(0, stopByStdin)
	}()
}

// stopReason is the summary's stop_reason for a value of the stop store.
func stopReason(v int32) string {
	if v == stopByStdin {
		return "stdin"
	}
	return syscall.Signal(v).String()
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "gmp-sampler: "+format+"\n", a...)
	os.Exit(2)
}

// fail ends a run that could not start (exit 2): the prose line, and where --summary
// points the error as JSON facts (kind, file, line: gmpanalysis raises a CgroupFormatError
// for content the kernel does not write) with stop_reason "not started".
func fail(c *config, err error) {
	fmt.Fprintf(os.Stderr, "gmp-sampler: %v\n", err)
	if werr := writeFailure(os.Stderr, c.summary, err); werr != nil {
		fmt.Fprintf(os.Stderr, "gmp-sampler: summary: %v\n", werr)
	}
	os.Exit(2)
}
