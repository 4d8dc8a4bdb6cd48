// gmp-loadgen drives HTTP load at a loopback service with vegeta and records every request
// as `sched_ns,start_ns,end_ns,status,cpu_ns` on CLOCK_MONOTONIC, appended as results
// arrive; cpu_ns is the CPU the service says the request cost (gmp-demoapp's Gmp-Cpu-Ns
// header), empty when it says nothing.
//
// Open loop (--mode open): arrivals at --rate per second, Poisson (exponential gaps from a
// seeded generator) or constant. sched_ns is the arrival time the schedule asked for, so
// latency measured from it includes time spent waiting behind a stalled service: no
// coordinated omission. Closed loop (--mode closed): --concurrency clients, each sending
// its next request when the previous one returns; sched_ns = start_ns.
//
// Bounded in both count (--max-requests) and time (--duration).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/gmpanalysis/gmpanalysis/collectors/demoapp"
	"github.com/gmpanalysis/gmpanalysis/collectors/internal/bundle"
	vegeta "github.com/tsenart/vegeta/v12/lib"
	"golang.org/x/sys/unix"
)

// clock maps time.Time values (which carry the runtime's monotonic reading) onto
// CLOCK_MONOTONIC ns, the clock of the cgroup samples and of the Go execution trace:
// differences of monotonic readings are exact differences of that clock, so only the
// offset at t0 is needed. It comes from clock_gettime (a system call: the runtime's own
// read is not exported) bracketed by two time.Now calls; the narrowest of a few brackets
// places it within half its width (≈0.1–0.2 µs here), against request times in ms.
type clock struct {
	t0   time.Time
	mono int64
}

func newClock() clock {
	best := clock{}
	width := time.Duration(1<<63 - 1)
	for i := 0; i < 16; i++ {
		a := time.Now()
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			fatalf("clock_gettime(CLOCK_MONOTONIC): %v", err)
		}
		w := time.Since(a)
		if w < width {
			// the read happened between a and a+w: take the middle
			width, best = w, clock{t0: a, mono: ts.Nano() - w.Nanoseconds()/2}
		}
	}
	return best
}

func (c clock) ns(t time.Time) int64 { return c.mono + t.Sub(c.t0).Nanoseconds() }

// schedule is a pacer with precomputed arrival offsets; offsets[k] is when request k is due.
type schedule struct {
	offsets []time.Duration
	began   time.Time // set at the first Pace call: vegeta's attack start
	started bool
}

func (s *schedule) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if !s.started {
		s.began, s.started = time.Now().Add(-elapsed), true
	}
	if hits >= uint64(len(s.offsets)) {
		return 0, true
	}
	if wait := s.offsets[hits] - elapsed; wait > 0 {
		return wait, false
	}
	return 0, false
}

func (s *schedule) Rate(elapsed time.Duration) float64 { return 0 }

// closedLoop never waits: vegeta then hands a tick to whichever of its fixed workers is free.
type closedLoop struct{ max uint64 }

func (c closedLoop) Pace(_ time.Duration, hits uint64) (time.Duration, bool) {
	return 0, hits >= c.max
}
func (c closedLoop) Rate(time.Duration) float64 { return math.Inf(1) }

func offsets(arrivals string, rate float64, duration time.Duration, max int, seed uint64) ([]time.Duration, error) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	var out []time.Duration
	t := 0.0
	for len(out) < max {
		switch arrivals {
		case "poisson":
			t += rng.ExpFloat64() / rate
		case "constant":
			if len(out) > 0 {
				t += 1 / rate
			}
		default:
			return nil, fmt.Errorf("unknown --arrivals %q (poisson or constant)", arrivals)
		}
		d := time.Duration(t * 1e9)
		if d >= duration {
			break
		}
		out = append(out, d)
	}
	return out, nil
}

// header is requests.csv's first line. cpu_ns came later: a file begun without it is
// appended to in its own four columns.
const header = "sched_ns,start_ns,end_ns,status,cpu_ns\n"

// headerNoCPU is the first line of a requests.csv begun before cpu_ns.
const headerNoCPU = "sched_ns,start_ns,end_ns,status\n"

// openOut opens the requests CSV for appending and says whether its rows carry cpu_ns,
// writing the header to a new or empty file.
func openOut(path string) (*os.File, bool, error) {
	if path == "-" {
		// a redirect appending to a file already begun (>>) keeps that file's columns;
		// stdout is write-only, so its file is read through /proc
		if st, err := os.Stdout.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
			r, err := os.Open("/proc/self/fd/1")
			if err != nil {
				return os.Stdout, false, nil // unknown: the four columns every reader takes
			}
			defer r.Close()
			ok, err := begunWithCPU(r)
			return os.Stdout, ok, err
		}
		_, err := os.Stdout.WriteString(header)
		return os.Stdout, true, err
	}
	if _, err := bundle.DropCutLine(path, header, headerNoCPU); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, false, err
	}
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		_, err = f.WriteString(header)
		return f, true, err
	}
	ok, err := begunWithCPU(f)
	return f, ok, err
}

// begunWithCPU says whether a requests file already begun has the cpu_ns column.
func begunWithCPU(f *os.File) (bool, error) {
	first := make([]byte, len(header))
	n, err := f.ReadAt(first, 0)
	if err != nil && err != io.EOF {
		return false, fmt.Errorf("%s: reading its header: %w", f.Name(), err)
	}
	return string(first[:n]) == header, nil
}

// appendRow appends one request's CSV line to row.
func appendRow(row []byte, sched, start, end int64, status int, res *vegeta.Result, withCPU bool) []byte {
	row = strconv.AppendInt(row, sched, 10)
	row = append(row, ',')
	row = strconv.AppendInt(row, start, 10)
	row = append(row, ',')
	row = strconv.AppendInt(row, end, 10)
	row = append(row, ',')
	row = strconv.AppendInt(row, int64(status), 10)
	if withCPU {
		row = append(row, ',')
		if v, err := strconv.ParseInt(res.Headers.Get(demoapp.CPUHeader), 10, 64); err == nil && v >= 0 {
			row = strconv.AppendInt(row, v, 10)
		}
	}
	return append(row, '\n')
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "gmp-loadgen: "+format+"\n", a...)
	os.Exit(2)
}

func main() {
	target := flag.String("url", "", "URL to GET, e.g. http://127.0.0.1:8080/work?ms=30")
	mode := flag.String("mode", "open", "open (arrival rate) or closed (fixed clients)")
	arrivals := flag.String("arrivals", "poisson", "open loop arrivals: poisson or constant")
	rate := flag.Float64("rate", 10, "open loop: requests per second")
	conc := flag.Int("concurrency", 4, "closed loop: clients; open loop: initial workers")
	duration := flag.Duration("duration", 10*time.Second, "stop scheduling after this long (required bound)")
	maxReq := flag.Int("max-requests", 100_000, "stop after this many requests (required bound)")
	timeout := flag.Duration("timeout", 10*time.Second, "per-request timeout")
	seed := flag.Uint64("seed", 1, "seed of the Poisson schedule")
	out := flag.String("out", "-", "requests CSV, appended (\"-\" = stdout)")
	summaryPath := flag.String("summary", "", "write a JSON summary to this file")
	flag.Parse()

	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		fatalf("--url must be an http:// URL, got %q", *target)
	}
	if *duration <= 0 || *duration > time.Hour || *maxReq <= 0 {
		fatalf("--duration must be in (0, 1h] and --max-requests > 0: load is always bounded")
	}
	if *conc < 1 || *conc > 10_000 {
		fatalf("--concurrency must be in [1, 10000]")
	}

	w, withCPU, err := openOut(*out)
	if err != nil {
		fatalf("%v", err)
	}

	opts := []func(*vegeta.Attacker){vegeta.Timeout(*timeout), vegeta.KeepAlive(true), vegeta.Redirects(0)}
	var pacer vegeta.Pacer
	var sched *schedule
	switch *mode {
	case "open":
		if *rate <= 0 || *rate > 100_000 {
			fatalf("--rate must be in (0, 100000]")
		}
		offs, err := offsets(*arrivals, *rate, *duration, *maxReq, *seed)
		if err != nil {
			fatalf("%v", err)
		}
		sched = &schedule{offsets: offs}
		pacer = sched
		opts = append(opts, vegeta.Workers(uint64(*conc)))
	case "closed":
		pacer = closedLoop{max: uint64(*maxReq)}
		opts = append(opts, vegeta.Workers(uint64(*conc)), vegeta.MaxWorkers(uint64(*conc)))
	default:
		fatalf("unknown --mode %q (open or closed)", *mode)
	}

	atk := vegeta.NewAttacker(opts...)
	clk := newClock()
	tr := vegeta.NewStaticTargeter(vegeta.Target{Method: "GET", URL: *target})

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sigs; atk.Stop() }()

	var lat []float64
	var ok, failed int
	firstStart, lastEnd := int64(math.MaxInt64), int64(0)
	row := make([]byte, 0, 128)
	// vegeta numbers requests in the order workers pick up their ticks, which is the
	// schedule's order; two arrivals microseconds apart may swap, which moves sched_ns by
	// those microseconds.
	for res := range atk.Attack(tr, pacer, *duration, "gmp") {
		start, end := clk.ns(res.Timestamp), clk.ns(res.End())
		sch := start
		if sched != nil && res.Seq < uint64(len(sched.offsets)) {
			sch = clk.ns(sched.began.Add(sched.offsets[res.Seq]))
		}
		status := int(res.Code)
		row = appendRow(row[:0], sch, start, end, status, res, withCPU)
		if _, err := w.Write(row); err != nil {
			fatalf("write: %v", err)
		}
		if status >= 200 && status < 300 {
			ok++
			lat = append(lat, float64(end-sch)/1e6)
		} else {
			failed++
		}
		firstStart, lastEnd = min(firstStart, start), max(lastEnd, end)
	}

	slices.Sort(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return math.NaN()
		}
		return lat[int(p*float64(len(lat)-1))]
	}
	// JSON has no NaN: an empty run reports null latencies.
	qj := func(p float64) any {
		if len(lat) == 0 {
			return nil
		}
		return q(p)
	}
	span := float64(lastEnd-firstStart) / 1e9
	sum := map[string]any{
		"mode": *mode, "arrivals": *arrivals, "rate": *rate, "concurrency": *conc,
		"duration_s": duration.Seconds(), "max_requests": *maxReq, "seed": *seed,
		"requests": ok + failed, "ok": ok, "errors": failed,
		"latency_p50_ms": qj(0.50), "latency_p99_ms": qj(0.99), "latency_max_ms": qj(1),
		"generator": "vegeta v12 (library)",
	}
	if span > 0 {
		sum["throughput_rps"] = float64(ok) / span
	}
	// the span the prose line below reports, as facts (CLOCK_MONOTONIC ns)
	if ok+failed > 0 {
		sum["span_s"], sum["first_start_ns"], sum["last_end_ns"] = span, firstStart, lastEnd
	} else {
		sum["span_s"], sum["first_start_ns"], sum["last_end_ns"] = nil, nil, nil
	}
	if ok+failed > 0 {
		fmt.Fprintf(os.Stderr, "gmp-loadgen: %d requests (%d ok, %d errors) in %.2fs; latency p50 %.1fms p99 %.1fms\n",
			ok+failed, ok, failed, span, q(0.5), q(0.99))
	} else {
		fmt.Fprintf(os.Stderr, "gmp-loadgen: no request sent (rate %g/s for %s)\n", *rate, duration)
	}
	if *summaryPath != "" {
		b, _ := json.MarshalIndent(sum, "", "  ")
		_ = os.WriteFile(*summaryPath, append(b, '\n'), 0o644)
	}
}
