// gmp-tracedump reads a Go execution trace with golang.org/x/exp/trace (the Go team's own
// reader) and prints a JSON summary: STW ranges with their kind, GC mark phases, GOMAXPROCS
// changes, per-goroutine and per-P running totals. It is the reference the Python reader is
// checked against, and its peer in benchmarks.
//
// Times are x/exp's: CLOCK_MONOTONIC ns on Linux, nudged by the reader where needed to keep
// them strictly increasing.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

type summary struct {
	Events     int64            `json:"events"`
	FirstNs    int64            `json:"first_ns"`
	LastNs     int64            `json:"last_ns"`
	STW        [][4]any         `json:"stw"` // start_ns, end_ns, kind, goroutine
	GC         [][2]int64       `json:"gc"`  // mark phase start_ns, end_ns
	Gomaxprocs [][2]int64       `json:"gomaxprocs"`
	RunningG   map[string]int64 `json:"running_g_ns"`
	RunningP   map[string]int64 `json:"running_p_ns"`
	RunCount   int64            `json:"running_intervals"`
	Intervals  [][5]int64       `json:"intervals,omitempty"` // g, p, start_ns, end_ns, nudged (bit 0 start, bit 1 end)
	Open       map[string]int   `json:"open_at_end"`
	ReadCPUNs  int64            `json:"read_cpu_ns"`
	ReadWallNs int64            `json:"read_wall_ns"`
	PeakRSSKiB int64            `json:"peak_rss_kib"`
	Error      string           `json:"error,omitempty"`
}

type open struct {
	t      int64
	proc   trace.ProcID
	nudged bool
}

func flags(start, end bool) int64 {
	var f int64
	if start {
		f |= 1
	}
	if end {
		f |= 2
	}
	return f
}

func main() {
	quiet := flag.Bool("count-only", false, "only read every event (benchmark peer); print counts and timing")
	withIntervals := flag.Bool("intervals", false, "also list every running interval as [g, p, start_ns, end_ns]")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: gmp-tracedump [--count-only] TRACE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "gmp-tracedump:", err)
		os.Exit(2)
	}
	defer f.Close()

	s := summary{RunningG: map[string]int64{}, RunningP: map[string]int64{}, Open: map[string]int{}}
	cpu0 := cpuNs()
	wall0 := time.Now()
	r, err := trace.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		fmt.Fprintln(os.Stderr, "gmp-tracedump:", err)
		os.Exit(1)
	}
	stwOpen := map[trace.GoID]struct {
		t    int64
		kind string
	}{}
	var gcOpen int64 = -1
	running := map[trace.GoID]open{}
	lastProcs := int64(-1)
	var prevT int64
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			s.Error = err.Error()
			break
		}
		s.Events++
		t := int64(ev.Time())
		// x/exp moves a time it cannot keep in order to the previous event's time + 1 ns;
		// raw Linux times are multiples of 64 ns, so such a time is a moved one
		nudged := t%64 != 0 || t == prevT+1
		prevT = t
		if s.FirstNs == 0 {
			s.FirstNs = t
		}
		s.LastNs = t
		if *quiet {
			continue
		}
		switch ev.Kind() {
		case trace.EventRangeBegin, trace.EventRangeActive:
			// a range under way when a generation begins is stated again there
			// (RangeActive): it opens one only where none is open (one begun before the trace)
			again := ev.Kind() == trace.EventRangeActive
			rg := ev.Range()
			if kind, ok := strings.CutPrefix(rg.Name, "stop-the-world ("); ok {
				if _, open := stwOpen[ev.Goroutine()]; !(again && open) {
					stwOpen[ev.Goroutine()] = struct {
						t    int64
						kind string
					}{t, strings.TrimSuffix(kind, ")")}
				}
			} else if rg.Name == "GC concurrent mark phase" && !(again && gcOpen >= 0) {
				gcOpen = t
			}
		case trace.EventRangeEnd:
			rg := ev.Range()
			if strings.HasPrefix(rg.Name, "stop-the-world (") {
				if o, ok := stwOpen[ev.Goroutine()]; ok {
					s.STW = append(s.STW, [4]any{o.t, t, o.kind, int64(ev.Goroutine())})
					delete(stwOpen, ev.Goroutine())
				}
			} else if rg.Name == "GC concurrent mark phase" && gcOpen >= 0 {
				s.GC = append(s.GC, [2]int64{gcOpen, t})
				gcOpen = -1
			}
		case trace.EventMetric:
			m := ev.Metric()
			if m.Name == "/sched/gomaxprocs:threads" {
				v := int64(m.Value.Uint64())
				if v != lastProcs {
					s.Gomaxprocs = append(s.Gomaxprocs, [2]int64{t, v})
					lastProcs = v
				}
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			from, to := st.Goroutine()
			id := st.Resource.Goroutine()
			if from == trace.GoRunning && to == trace.GoRunning {
				continue // a status re-stated at a generation boundary: it kept running
			}
			if from == trace.GoRunning {
				if o, ok := running[id]; ok {
					s.RunningG[fmt.Sprint(id)] += t - o.t
					s.RunningP[fmt.Sprint(o.proc)] += t - o.t
					s.RunCount++
					if *withIntervals {
						s.Intervals = append(s.Intervals, [5]int64{int64(id), int64(o.proc), o.t, t, flags(o.nudged, nudged)})
					}
					delete(running, id)
				}
			}
			if to == trace.GoRunning {
				running[id] = open{t, ev.Proc(), nudged}
			}
		}
	}
	// Ranges and intervals still open at the end close at the last event.
	for id, o := range running {
		s.RunningG[fmt.Sprint(id)] += s.LastNs - o.t
		s.RunningP[fmt.Sprint(o.proc)] += s.LastNs - o.t
		s.RunCount++
		if *withIntervals {
			s.Intervals = append(s.Intervals, [5]int64{int64(id), int64(o.proc), o.t, s.LastNs, flags(o.nudged, s.LastNs%64 != 0)})
		}
	}
	s.Open["running"] = len(running)
	s.Open["stw"] = len(stwOpen)
	if gcOpen >= 0 {
		s.GC = append(s.GC, [2]int64{gcOpen, s.LastNs})
		s.Open["gc"] = 1
	}
	sort.Slice(s.STW, func(i, j int) bool { return s.STW[i][0].(int64) < s.STW[j][0].(int64) })
	s.ReadCPUNs = cpuNs() - cpu0
	s.ReadWallNs = time.Since(wall0).Nanoseconds()
	s.PeakRSSKiB = peakRSSKiB()
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(s); err != nil {
		fmt.Fprintln(os.Stderr, "gmp-tracedump:", err)
		os.Exit(1)
	}
	if s.Error != "" {
		os.Exit(1)
	}
}
