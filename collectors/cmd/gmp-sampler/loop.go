package main

import (
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

// sampler is the sampling loop and its state. Everything run touches is allocated
// beforehand: run allocates nothing until it stops.
type sampler struct {
	targets []*target
	cols    columns // the rows' optional columns (the output's header)
	w       *os.File
	hs      *hostStat     // nil: no /proc/stat reads
	ls      *limitsSeries // nil: no limits reads (--limits-out off)
	stop    *atomic.Int32 // the signal that asked to stop; 0 until one did
	iv      int64         // interval, ns
	flushNs int64
	sum     *summary // the counters and the stop reason go straight in

	cpu0         int64 // process CPU time at begin
	start        int64 // CLOCK_MONOTONIC of deadline 0: deadline k is start + k·iv
	endAt        int64 // no deadline at or after this
	lat, readDur latencyHist
	st           cgroup.Stat
	pending      []byte // rows not written yet
	lastFlush    int64
	badData      bool // stopped on a read that did not parse
	stopping     bool // this tick is the last, taken after a stop was asked for
}

func newSampler(c *config, targets []*target, cols columns, w *os.File, hs *hostStat, ls *limitsSeries,
	stop *atomic.Int32, sum *summary) *sampler {
	return &sampler{
		targets: targets, cols: cols, w: w, hs: hs, ls: ls, stop: stop,
		iv: c.interval.Nanoseconds(), flushNs: c.flush.Nanoseconds(), sum: sum,
		pending: make([]byte, 0, 1<<16),
	}
}

// begin fixes the grid at now: the first deadline is at once, the last before duration
// has passed (0: none, run until stopped).
func (s *sampler) begin(duration time.Duration) {
	s.cpu0 = cpuTimeNs()
	s.start = monoNs()
	s.sum.MonoStartNs = s.start
	s.endAt = 1<<63 - 1
	if duration > 0 {
		s.endAt = s.start + duration.Nanoseconds()
	}
	s.sum.StopReason = "duration"
	if s.hs != nil {
		s.hs.next = s.start
	}
	if s.ls != nil {
		s.ls.next = s.start
	}
}

// run samples on the grid until the end of the run, a stop signal, a failed read or a
// failed write; sum.StopReason says which.
func (s *sampler) run() {
	start, iv, endAt := s.start, s.iv, s.endAt
	k := int64(0)
	for {
		deadline := start + k*iv
		if deadline >= endAt {
			return
		}
		ts := unix.NsecToTimespec(deadline)
		sleepUntil(&ts)
		// A stop still takes this tick's read, which comes after the request: whoever stops
		// the sampler does so after what the rows must bracket (the agent, a trace's end), so
		// the last row may not come before it, however late this wake-up is. Not on SIGPIPE:
		// the output is gone.
		sig := s.stop.Load()
		if sig == int32(syscall.SIGPIPE) {
			s.sum.StopReason = stopReason(sig)
			return
		}
		s.stopping = sig != 0
		now := monoNs()
		s.lat.add(now - deadline)
		s.sum.Ticks++
		last, ok := s.readTargets()
		if !ok {
			return
		}
		// The limit files after this tick's cpu.stat reads, so those are never delayed
		// (≈2 µs per cgroup for the three preads here; a change is dated to within
		// --limits-every anyway).
		if s.ls != nil && s.ls.due(last) {
			if last, ok = s.readLimits(); !ok {
				return
			}
		}
		// the end of the last read is "now" for the flush and /proc/stat decisions
		if last-s.lastFlush >= s.flushNs || len(s.pending) > cap(s.pending)-4096 ||
			(s.ls != nil && len(s.ls.pending) > cap(s.ls.pending)-4096) {
			s.lastFlush = last
			if err := s.flush(); err != nil {
				s.sum.StopReason = "write failed: " + err.Error()
				return
			}
		}
		// Once a second, after this tick's reads so they are not delayed: the host's
		// /proc/stat (≈tens of µs, well inside the interval).
		if s.hs != nil {
			s.hs.sampleIfDue(last)
		}
		if s.stopping {
			s.sum.StopReason = stopReason(sig)
			return
		}
		// Keep the grid start + k·interval; if we overslept past later deadlines, skip them.
		k++
		if next := monoNs(); next > start+k*iv {
			behind := (next - (start + k*iv)) / iv
			s.sum.Missed += uint64(behind)
			k += behind
		}
	}
}

// readTargets reads every target once and queues its row. It returns the end of the last
// read, and false when a read failed (the stop reason says why; no row for it).
func (s *sampler) readTargets() (last int64, ok bool) {
	for _, t := range s.targets {
		t0 := monoNs()
		// pread at offset 0 on the files kept open (cgroup.Reader). The row's time is the
		// cpu.stat read's alone; cgroup v2's signal files are read right after it.
		stat, usage, err := t.ReadRawStat()
		t1 := monoNs()
		last = t1
		var pressure, local []byte
		if err == nil && t.signals {
			pressure, local, err = t.ReadRawSignals()
			last = monoNs()
		}
		if err == nil {
			err = t.Parse(stat, usage, &s.st)
		}
		if err != nil {
			s.readFailed(t, err)
			return last, false
		}
		if t.reads == 0 {
			t.first.set(stat, pressure, local)
		}
		t.last.set(stat, pressure, local)
		t.reads++
		s.readDur.add(t1 - t0)
		s.pending = appendRow(s.pending, t.name, (t0+t1)/2, t1-t0, &s.st, s.cols)
		s.sum.Rows++
	}
	return last, true
}

// readLimits reads every target's limit files once and queues a row for each cgroup read
// for the first time or whose limits changed. It returns the end of the last read, and
// false when a read failed (as readTargets).
func (s *sampler) readLimits() (last int64, ok bool) {
	for _, t := range s.targets {
		t0 := monoNs()
		err := t.lim.r.Read(&s.ls.lim)
		t1 := monoNs()
		last = t1
		if err != nil {
			s.readFailed(t, err)
			return last, false
		}
		s.ls.observe(t.lim, (t0+t1)/2, &s.ls.lim)
	}
	return last, true
}

// readFailed records why the run stops. The cgroup vanished (container restart, pod
// deleted), or a read did not parse (never written as a row of zeros): stop cleanly so
// what was written stays a valid file.
func (s *sampler) readFailed(t *target, err error) {
	ge, gone := err.(*cgroup.GoneError)
	if gone && s.stopping {
		// the read after a stop: the container may end at once once its collector has
		// asked the sampler to stop; the stop stays the signal's, clean
		s.sum.StopReason = stopReason(s.stop.Load())
		return
	}
	s.sum.ReadErrors++
	if gone {
		s.sum.StopReason = "cgroup gone: " + ge.Path
	} else {
		s.sum.StopReason = "bad cgroup data: " + err.Error()
		s.sum.Error = cgroup.Facts(err)
		s.badData = true
	}
}

// flush writes the queued rows with one write(2) per output.
func (s *sampler) flush() error {
	var err error
	if len(s.pending) > 0 {
		_, err = s.w.Write(s.pending)
		s.pending = s.pending[:0]
	}
	if s.ls != nil {
		if lerr := s.ls.flush(); err == nil {
			err = lerr
		}
	}
	return err
}

// finish writes what is left, takes a last host row so the host rows bracket the whole
// run, and completes the summary.
func (s *sampler) finish() {
	if err := s.flush(); err != nil {
		s.sum.StopReason = "write failed: " + err.Error()
	}
	if s.hs != nil {
		s.hs.sample()
		s.sum.HostStatErrors = s.hs.errs
	}
	// every key of the first and the last read of each target (summary.go)
	for i, t := range s.targets {
		if i < len(s.sum.Cgroups) {
			addReads(s.sum.Cgroups[i], t)
			if _, ok := s.sum.Cgroups[i]["cpus"]; !ok {
				// a cgroup the process joined after the start: its CPUs now
				if n := cgroup.CPUs(t.Dir); n > 0 {
					s.sum.Cgroups[i]["cpus"] = n
				}
			}
		}
	}
	end := monoNs()
	s.sum.MonoEndNs = end
	s.sum.LateP50Ns, s.sum.LateP99Ns, s.sum.LateMaxNs = s.lat.quantile(0.50), s.lat.quantile(0.99), s.lat.max
	s.sum.ReadP50Ns, s.sum.ReadP99Ns = s.readDur.quantile(0.50), s.readDur.quantile(0.99)
	if end > s.start {
		s.sum.CPUPctOfCore = 100 * float64(cpuTimeNs()-s.cpu0) / float64(end-s.start)
	}
}

// exitCode: 4 when a read did not parse, 3 when a cgroup went away, else 0.
func (s *sampler) exitCode() int {
	switch {
	case s.badData:
		return 4
	case s.sum.ReadErrors > 0:
		return 3
	}
	return 0
}
