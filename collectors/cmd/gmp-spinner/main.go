// gmp-spinner burns CPU on N OS threads and logs every gap in its own progress: an
// independent record of when a process stood frozen, to hold against the cgroup counters
// and the Go execution trace. Run inside a CPU-limited cgroup, the gaps that all threads
// share are the throttles: each starts when the quota ran out and ends at (or just after)
// a period boundary.
//
// Each spinner goroutine locks itself to an OS thread and reads CLOCK_MONOTONIC in a
// loop, as absolute ns: the clock of the kernel's CFS period timer (an hrtimer on
// CLOCK_MONOTONIC), of the sampler's rows and of the Go trace (ticks × 64 on Linux). Two
// consecutive reads on one thread further apart than --gap are a gap [start_ns, end_ns]:
// the thread did not run in between (throttled, preempted by another task, or stopped by
// the Go runtime).
//
// Output, JSON lines:
//
//	{"spinner":{"pid":…,"threads":N,"gap_ns":…,"start_ns":…}}
//	{"gap":{"thread":i,"start_ns":…,"end_ns":…}}           one per gap
//	{"done":{"end_ns":…,"gaps":…,"dropped":…}}
//
// Spinning threads never write: they hand gaps to a writer goroutine through buffered
// channels without ever waiting (a full channel counts the gap as dropped), and the
// writer writes whole lines with one write(2) at least every 100 ms, so a killed spinner
// leaves complete lines. GOMAXPROCS is threads+1 so the writer always has a P, and the
// garbage collector is off (neither the spinners nor the writer allocate while running):
// a stop-the-world would show as a gap on every thread, like a throttle.
//
// Exit status: 0 at the end of --duration or on SIGINT/SIGTERM, 2 for bad arguments or
// an output that cannot be opened, 1 when a write failed.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// gap is one stretch in which a thread made no progress: its last read before the gap and
// its first read after, CLOCK_MONOTONIC ns.
type gap struct {
	thread     int
	start, end int64
}

// gapDetector turns a thread's successive clock reads into gaps.
type gapDetector struct {
	limit int64 // ns: reads further apart than this are a gap
	last  int64 // previous read; 0 before the first
}

// observe takes the next read; it returns the gap that ended at now, if there was one.
func (d *gapDetector) observe(now int64) (start, end int64, ok bool) {
	if d.last != 0 && now-d.last > d.limit {
		start, end, ok = d.last, now, true
	}
	d.last = now
	return start, end, ok
}

// monoNs reads CLOCK_MONOTONIC.
func monoNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail: valid clock, valid pointer
	return ts.Nano()
}

// spin reads clock until stop is set, sending each gap to out without ever blocking: a
// gap that finds out full is counted in dropped. It allocates nothing.
func spin(thread int, clock func() int64, limit int64, stop *atomic.Bool, out chan<- gap, dropped *atomic.Uint64) {
	d := gapDetector{limit: limit}
	for !stop.Load() {
		if s, e, ok := d.observe(clock()); ok {
			select {
			case out <- gap{thread, s, e}:
			default:
				dropped.Add(1)
			}
		}
	}
}

func appendHeader(b []byte, pid, threads int, gapNs, startNs int64) []byte {
	b = append(b, `{"spinner":{"pid":`...)
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, `,"threads":`...)
	b = strconv.AppendInt(b, int64(threads), 10)
	b = append(b, `,"gap_ns":`...)
	b = strconv.AppendInt(b, gapNs, 10)
	b = append(b, `,"start_ns":`...)
	b = strconv.AppendInt(b, startNs, 10)
	return append(b, "}}\n"...)
}

func appendGap(b []byte, g gap) []byte {
	b = append(b, `{"gap":{"thread":`...)
	b = strconv.AppendInt(b, int64(g.thread), 10)
	b = append(b, `,"start_ns":`...)
	b = strconv.AppendInt(b, g.start, 10)
	b = append(b, `,"end_ns":`...)
	b = strconv.AppendInt(b, g.end, 10)
	return append(b, "}}\n"...)
}

func appendDone(b []byte, endNs int64, gaps, dropped uint64) []byte {
	b = append(b, `{"done":{"end_ns":`...)
	b = strconv.AppendInt(b, endNs, 10)
	b = append(b, `,"gaps":`...)
	b = strconv.AppendUint(b, gaps, 10)
	b = append(b, `,"dropped":`...)
	b = strconv.AppendUint(b, dropped, 10)
	return append(b, "}}\n"...)
}

// chanSize: gaps a thread may queue between two flushes. A gap lasts more than --gap, so
// a thread makes at most 100 ms / --gap of them in 100 ms (100 at the default 1 ms).
const chanSize = 4096

// flushEvery bounds how long a gap waits before it is written.
const flushEvery = 100 * time.Millisecond

// writer drains the gap channels into whole lines, written with one write(2) at least
// every flushEvery and once more when done is closed; it returns the gaps written and the
// first write error, after which it sets stop and writes nothing more.
func writer(w io.Writer, in []chan gap, done <-chan struct{}, every time.Duration, stop *atomic.Bool) (n uint64, err error) {
	buf := make([]byte, 0, 1<<16)
	tick := time.NewTicker(every)
	defer tick.Stop()
	drain := func() {
		for _, c := range in {
			for more := true; more; {
				select {
				case g := <-c:
					buf = appendGap(buf, g)
					n++
				default:
					more = false
				}
			}
		}
		if len(buf) > 0 && err == nil {
			if _, err = w.Write(buf); err != nil {
				stop.Store(true)
			}
		}
		buf = buf[:0]
	}
	for {
		select {
		case <-tick.C:
			drain()
		case <-done:
			drain()
			return n, err
		}
	}
}

type config struct {
	threads  int
	gap      time.Duration
	duration time.Duration
	out      string
}

func (c *config) register(fs *flag.FlagSet) {
	fs.IntVar(&c.threads, "threads", 2, "spinning OS threads")
	fs.DurationVar(&c.gap, "gap", time.Millisecond, "a gap is two consecutive clock reads on one thread further apart than this")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long (0: until SIGINT/SIGTERM)")
	fs.StringVar(&c.out, "out", "-", "JSON lines output file, written anew (\"-\" = stdout)")
}

func (c *config) validate() error {
	if c.threads < 1 || c.threads > 1024 {
		return fmt.Errorf("--threads %d: want 1..1024", c.threads)
	}
	if c.gap < 10*time.Microsecond {
		return fmt.Errorf("--gap %v is too small (minimum 10µs: a clock read alone takes ~0.3µs, a wake-up tens)", c.gap)
	}
	if c.duration < 0 {
		return fmt.Errorf("--duration %v is negative", c.duration)
	}
	return nil
}

// run spins until stop is set (by a signal or the duration) and writes the whole log to w.
func run(c *config, w io.Writer, stop *atomic.Bool) error {
	start := monoNs()
	if _, err := w.Write(appendHeader(nil, os.Getpid(), c.threads, c.gap.Nanoseconds(), start)); err != nil {
		return err
	}
	chans := make([]chan gap, c.threads)
	for i := range chans {
		chans[i] = make(chan gap, chanSize)
	}
	var dropped atomic.Uint64
	var wg sync.WaitGroup
	for i := 0; i < c.threads; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One goroutine per OS thread: a gap is then the thread's, and the kernel's
			// throttling acts on threads.
			runtime.LockOSThread()
			spin(i, monoNs, c.gap.Nanoseconds(), stop, chans[i], &dropped)
		}()
	}
	done := make(chan struct{})
	type result struct {
		n   uint64
		err error
	}
	res := make(chan result, 1)
	go func() {
		n, err := writer(w, chans, done, flushEvery, stop)
		res <- result{n, err}
	}()
	wg.Wait()
	end := monoNs()
	close(done)
	r := <-res
	if r.err != nil {
		return r.err
	}
	_, err := w.Write(appendDone(nil, end, r.n, dropped.Load()))
	return err
}

func main() {
	var c config
	c.register(flag.CommandLine)
	flag.Parse()
	if err := c.validate(); err != nil {
		fatalf("%v", err)
	}
	w := os.Stdout
	if c.out != "-" {
		f, err := os.Create(c.out)
		if err != nil {
			fatalf("cannot open output: %v", err)
		}
		defer f.Close()
		w = f
	}
	// A P for every spinner and one for the writer; setting it also turns off the
	// runtime's own GOMAXPROCS updates (Go >= 1.25), whose stop-the-world would show as a
	// gap on every thread.
	runtime.GOMAXPROCS(c.threads + 1)
	debug.SetGCPercent(-1)

	var stop atomic.Bool
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		stop.Store(true)
	}()
	if c.duration > 0 {
		time.AfterFunc(c.duration, func() { stop.Store(true) })
	}
	if err := run(&c, w, &stop); err != nil {
		fmt.Fprintf(os.Stderr, "gmp-spinner: write: %v\n", err)
		os.Exit(1)
	}
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "gmp-spinner: "+format+"\n", a...)
	os.Exit(2)
}
