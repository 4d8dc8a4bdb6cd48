// gmp-sampler reads the CFS bandwidth counters of one or more cgroups at a fixed interval
// and appends them, one CSV row per read, to a file or stdout.
//
// Each row: t_ns (CLOCK_MONOTONIC midpoint of the read), read_ns (its duration), usage_us,
// nr_periods, nr_throttled, throttled_us, nr_bursts, burst_us [, cgroup]. Units are
// normalised to µs whatever the cgroup version (v1 reports ns). Rows are written with
// write(2) at least every --flush interval and the file only ever grows, so a sampler
// killed at any moment leaves a readable file holding all but the last few rows.
//
// Where the cgroup's files are and how they parse is internal/cgroup's. Exit status: 0 at
// the end of --duration or on a signal, 2 when nothing could be sampled (bad arguments, no
// such cgroup, files that do not parse at the first read), 3 when a sampled cgroup went
// away (its files no longer read), 4 when a later read did not parse (the summary's
// stop_reason quotes the file and line; no row is written for it).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
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

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

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

type summary struct {
	Cgroups        []map[string]any `json:"cgroups"`
	IntervalNs     int64            `json:"interval_ns"`
	Policy         string           `json:"policy"`
	PolicyError    string           `json:"policy_error,omitempty"`
	MonoStartNs    int64            `json:"mono_start_ns"`
	MonoEndNs      int64            `json:"mono_end_ns"`
	Ticks          uint64           `json:"ticks"`
	Rows           uint64           `json:"rows"`
	Missed         uint64           `json:"missed_ticks"`
	ReadErrors     uint64           `json:"read_errors"`
	LateP50Ns      int64            `json:"lateness_p50_ns"`
	LateP99Ns      int64            `json:"lateness_p99_ns"`
	LateMaxNs      int64            `json:"lateness_max_ns"`
	ReadP50Ns      int64            `json:"read_p50_ns"`
	ReadP99Ns      int64            `json:"read_p99_ns"`
	CPUPctOfCore   float64          `json:"cpu_pct_of_one_core"`
	HostStat       string           `json:"host_stat,omitempty"`
	HostStatErrors uint64           `json:"host_stat_errors,omitempty"`
	UserHZ         uint64           `json:"user_hz,omitempty"`
	StopReason     string           `json:"stop_reason"`
	SamplerVersion string           `json:"sampler_go_version"`
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

func cpuTimeNs() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "gmp-sampler: "+format+"\n", a...)
	os.Exit(2)
}

func main() {
	var cgroups multiFlag
	root := flag.String("root", "/sys/fs/cgroup", "cgroup mount root (v1: holds cpu/ and cpuacct/; v2: the unified mount)")
	flag.Var(&cgroups, "cgroup", "cgroup to sample as [NAME=]PATH relative to the root (repeatable; several add a `cgroup` column)")
	interval := flag.Duration("interval", 997*time.Microsecond,
		"sampling interval; one that does not divide the 100 ms CFS period sweeps the period boundary and pins its phase")
	duration := flag.Duration("duration", 0, "stop after this long (0: until SIGINT/SIGTERM)")
	out := flag.String("out", "-", "CSV output file, appended to (\"-\" = stdout)")
	fifo := flag.Bool("fifo", false, "run the sampling thread under SCHED_FIFO (needs root and the root cpu cgroup when RT group scheduling is on)")
	fifoPrio := flag.Int("fifo-prio", 10, "SCHED_FIFO priority")
	summaryPath := flag.String("summary", "", "write a JSON summary of the run to this file (\"stderr\": one {\"summary\":{...}} JSON line on stderr)")
	hostStatDest := flag.String("host-stat", "",
		"also read the host's /proc/stat (steal time) about once a --host-stat-every and append rows to this CSV file "+
			"(\"stderr\": one {\"host_stat\":{...}} JSON line per read on stderr; \"\": off)")
	hostEvery := flag.Duration("host-stat-every", time.Second, "interval between /proc/stat reads")
	idle := flag.Bool("idle", false, "do nothing until SIGTERM (the main process of a DaemonSet pod that collectors exec into)")
	flushEvery := flag.Duration("flush", 10*time.Millisecond,
		"write buffered rows at least this often (0: one write per row); a killed sampler loses at most this much")
	flag.Parse()

	if *idle {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		<-sigs
		return
	}
	if len(cgroups) == 0 {
		fatalf("no --cgroup given; example: --cgroup kubepods/burstable/pod<UID>/<containerID>")
	}
	if *interval < 10*time.Microsecond {
		fatalf("--interval %v is too small (minimum 10µs)", *interval)
	}
	mount, err := cgroup.Detect(*root)
	if err != nil {
		fatalf("%v", err)
	}
	targets := make([]*target, 0, len(cgroups))
	for _, spec := range cgroups {
		t, err := openTarget(mount, spec)
		if err != nil {
			fatalf("%v", err)
		}
		targets = append(targets, t)
		fmt.Fprintf(os.Stderr, "gmp-sampler: sampling %s at %s (cgroup v%d)\n", t.name, t.Rel, t.Version)
	}

	var w *os.File
	if *out == "-" {
		w = os.Stdout
	} else {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fatalf("cannot open output: %v", err)
		}
		w = f
		defer f.Close()
	}
	multi := len(targets) > 1
	// A header only for a new file: appending to an existing file continues its rows.
	if st, err := w.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		hdr := "t_ns,read_ns,usage_us,nr_periods,nr_throttled,throttled_us,nr_bursts,burst_us"
		if multi {
			hdr += ",cgroup"
		}
		if _, err := w.WriteString(hdr + "\n"); err != nil {
			fatalf("write: %v", err)
		}
	}

	var hs *hostStat
	if *hostStatDest != "" {
		if *hostEvery < time.Millisecond {
			fatalf("--host-stat-every %v is too small (minimum 1ms)", *hostEvery)
		}
		var err error
		if hs, err = openHostStat(*hostStatDest, hostEvery.Nanoseconds()); err != nil {
			fatalf("%v", err)
		}
		defer hs.close()
	}

	var stop atomic.Int32
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	go func() {
		s := <-sigs
		stop.Store(int32(s.(syscall.Signal)))
	}()

	sum := summary{IntervalNs: interval.Nanoseconds(), Policy: "SCHED_OTHER", SamplerVersion: runtime.Version(),
		HostStat: *hostStatDest}
	if hs != nil {
		sum.UserHZ = hs.userHz
	}
	for _, t := range targets {
		c := map[string]any{"name": t.name, "path": t.Rel, "version": t.Version, "cpu_stat": t.StatPath}
		if t.UsagePath != "" {
			c["cpuacct_usage"] = t.UsagePath
		}
		// The bandwidth settings in force at the start, as the kernel has them: a collector
		// records these rather than deriving them from a pod spec (the kubelet may set
		// another period, and limits change in place).
		if l, err := cgroup.ReadLimits(t.Dir, t.Version); err != nil {
			c["limits_error"] = err.Error()
		} else {
			lim := map[string]any{"period_us": l.PeriodUs, "quota_us": nil, "burst_us": l.BurstUs}
			if l.QuotaUs != cgroup.NoQuota {
				lim["quota_us"] = l.QuotaUs
			}
			c["limits"] = lim
		}
		sum.Cgroups = append(sum.Cgroups, c)
	}

	// The sampling loop runs on one locked OS thread: timer slack is a per-thread attribute.
	runtime.LockOSThread()
	if *fifo {
		if err := setFIFOAllThreads(*fifoPrio); err != nil {
			// EPERM here usually means RT group scheduling gives our cgroup no RT budget.
			sum.PolicyError = fmt.Sprintf("SCHED_FIFO refused (%v): stayed SCHED_OTHER; run as root from the root cpu cgroup", err)
			fmt.Fprintln(os.Stderr, "gmp-sampler: "+sum.PolicyError)
		} else {
			sum.Policy = "SCHED_FIFO:" + strconv.Itoa(*fifoPrio)
		}
	}
	// Default timer slack is 50 µs; 1 ns lets clock_nanosleep wake at the deadline.
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	// The loop allocates nothing; without GC no stop-the-world can delay a read.
	debug.SetGCPercent(-1)

	var lat, readDur latencyHist
	var st cgroup.Stat
	pending := make([]byte, 0, 1<<16)
	iv := interval.Nanoseconds()
	flushNs := flushEvery.Nanoseconds()
	var lastFlush, lastRead int64
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		_, err := w.Write(pending)
		pending = pending[:0]
		return err
	}

	cpu0 := cpuTimeNs()
	start := monoNs()
	sum.MonoStartNs = start
	if *summaryPath == "stderr" {
		// the facts a collector needs even if this process is killed before its summary:
		// what is sampled, the policy it got, the first deadline (the grid start + k·interval)
		b, _ := json.Marshal(map[string]any{"start": map[string]any{
			"cgroups": sum.Cgroups, "interval_ns": sum.IntervalNs, "policy": sum.Policy,
			"policy_error": sum.PolicyError, "mono_start_ns": start, "user_hz": sum.UserHZ,
			"sampler_go_version": sum.SamplerVersion,
		}})
		os.Stderr.Write(append(b, '\n'))
	}
	var endAt int64 = 1<<63 - 1
	if *duration > 0 {
		endAt = start + duration.Nanoseconds()
	}
	k := int64(0)
	badData := false
	sum.StopReason = "duration"
	if hs != nil {
		hs.next = start
	}
loop:
	for {
		deadline := start + k*iv
		if deadline >= endAt {
			break
		}
		ts := unix.NsecToTimespec(deadline)
		sleepUntil(&ts)
		if s := stop.Load(); s != 0 {
			sum.StopReason = syscall.Signal(s).String()
			break
		}
		now := monoNs()
		lat.add(now - deadline)
		sum.Ticks++
		for _, t := range targets {
			t0 := monoNs()
			// pread at offset 0 on the files kept open (cgroup.Reader)
			stat, usage, err := t.ReadRaw()
			t1 := monoNs()
			lastRead = t1
			if err == nil {
				err = t.Parse(stat, usage, &st)
			}
			if err != nil {
				// The cgroup vanished (container restart, pod deleted), or a read did not
				// parse (never written as a row of zeros): stop cleanly so what was written
				// stays a valid file.
				sum.ReadErrors++
				if _, gone := err.(*cgroup.GoneError); gone {
					sum.StopReason = "cgroup gone: " + t.StatPath
				} else {
					sum.StopReason = "bad cgroup data: " + err.Error()
					badData = true
				}
				break loop
			}
			readDur.add(t1 - t0)
			pending = appendRow(pending, t.name, (t0+t1)/2, t1-t0, &st, multi)
			sum.Rows++
		}
		// the end of the last read is "now" for the flush and /proc/stat decisions
		if t := lastRead; t-lastFlush >= flushNs || len(pending) > cap(pending)-4096 {
			lastFlush = t
			if err := flush(); err != nil {
				sum.StopReason = "write failed: " + err.Error()
				break
			}
		}
		// Once a second, after this tick's reads so they are not delayed: the host's
		// /proc/stat (≈tens of µs, well inside the interval).
		if hs != nil {
			if t := lastRead; t >= hs.next {
				hs.sample()
				for hs.next <= t {
					hs.next += hs.every
				}
			}
		}
		// Keep the grid start + k·interval; if we overslept past later deadlines, skip them.
		k++
		if next := monoNs(); next > start+k*iv {
			behind := (next - (start + k*iv)) / iv
			sum.Missed += uint64(behind)
			k += behind
		}
	}
	if err := flush(); err != nil {
		sum.StopReason = "write failed: " + err.Error()
	}
	if hs != nil {
		hs.sample() // a last row so the host rows bracket the whole run
		sum.HostStatErrors = hs.errs
	}
	end := monoNs()
	sum.MonoEndNs = end
	sum.LateP50Ns, sum.LateP99Ns, sum.LateMaxNs = lat.quantile(0.50), lat.quantile(0.99), lat.max
	sum.ReadP50Ns, sum.ReadP99Ns = readDur.quantile(0.50), readDur.quantile(0.99)
	if end > start {
		sum.CPUPctOfCore = 100 * float64(cpuTimeNs()-cpu0) / float64(end-start)
	}
	fmt.Fprintf(os.Stderr,
		"gmp-sampler: %d rows in %.2fs at %v, %s; wake-up lateness p50 %.0fµs p99 %.0fµs max %.0fµs; "+
			"missed ticks %d; own CPU %.2f%% of one core; stop: %s\n",
		sum.Rows, float64(end-start)/1e9, *interval, sum.Policy,
		float64(sum.LateP50Ns)/1e3, float64(sum.LateP99Ns)/1e3, float64(sum.LateMaxNs)/1e3,
		sum.Missed, sum.CPUPctOfCore, sum.StopReason)
	if *summaryPath == "stderr" {
		// one JSON line a collector reading stderr can tell from the prose above
		b, _ := json.Marshal(map[string]any{"summary": sum})
		os.Stderr.Write(append(b, '\n'))
	} else if *summaryPath != "" {
		b, _ := json.MarshalIndent(sum, "", "  ")
		if err := os.WriteFile(*summaryPath, append(b, '\n'), 0o644); err != nil {
			fatalf("summary: %v", err)
		}
	}
	if badData {
		os.Exit(4)
	}
	if sum.ReadErrors > 0 {
		os.Exit(3)
	}
}
