// gmp-tracepeer is the benchmark peer of the Python trace reader: the program a competent
// Go user would write to get the same tables from a trace with golang.org/x/exp/trace.
// It builds, in memory, every table read_trace returns — STW ranges with their kind, GC
// mark phases, GOMAXPROCS changes, every running interval (goroutine, P, thread, start,
// end, GC worker label), mark assists, sweeps with their byte counts, heap metrics and
// user logs — as slices of structs and maps keyed by typed IDs, and formats nothing while
// it reads. It prints one JSON line per read with the counts (so the work cannot be
// optimised away) and the read's CPU and wall time; -tables builds only the tables named; with -repeat N it reads N times in one
// process (a warm run), and the last line holds the process's peak memory (VmHWM).
//
// gmp-tracedump stays the correctness oracle; this program is only timed.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/exp/trace"
)

type stw struct {
	start, end int64
	kind       string
	g          trace.GoID
}

type span struct{ start, end int64 }

type procsChange struct {
	t     int64
	procs uint64
}

type interval struct {
	g          trace.GoID
	p          trace.ProcID
	m          trace.ThreadID
	start, end int64
	label      string
	open       bool
}

type sweep struct {
	p                trace.ProcID
	m                trace.ThreadID
	start, end       int64
	swept, reclaimed uint64
	open             bool
}

type heapSample struct {
	t           int64
	alloc, goal uint64
}

type logLine struct {
	t                 int64
	g                 trace.GoID
	m                 trace.ThreadID
	task              trace.TaskID
	category, message string
}

type tables struct {
	events     int64
	stw        []stw
	gc         []span
	gomaxprocs []procsChange
	running    []interval
	assist     []span
	sweep      []sweep
	heap       []heapSample
	logs       []logLine
}

type runningG struct {
	start int64
	p     trace.ProcID
	m     trace.ThreadID
}

type openSweep struct {
	start int64
	m     trace.ThreadID
}

// want names the tables to build; the others are skipped (every event is still decoded:
// x/exp/trace has no way to skip a generation's events).
type want map[string]bool

func read(path string, w want) (*tables, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := trace.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, err
	}
	t := &tables{}
	stwOpen := map[trace.GoID]stw{}
	gcOpen := int64(-1)
	running := map[trace.GoID]runningG{}
	labels := map[trace.GoID]string{}
	assistOpen := map[trace.GoID]int64{}
	sweepOpen := map[trace.ProcID]openSweep{}
	var heap heapSample
	lastProcs := uint64(0)
	var last int64
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		t.events++
		now := int64(ev.Time())
		last = now
		switch ev.Kind() {
		case trace.EventStateTransition:
			if !w["running"] {
				continue
			}
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			from, to := st.Goroutine()
			if from == trace.GoRunning && to == trace.GoRunning {
				continue // re-stated at a generation boundary: it kept running
			}
			id := st.Resource.Goroutine()
			if from == trace.GoRunning {
				if o, ok := running[id]; ok {
					t.running = append(t.running, interval{id, o.p, o.m, o.start, now, labels[id], false})
					delete(running, id)
				}
			}
			if to == trace.GoRunning {
				running[id] = runningG{now, ev.Proc(), ev.Thread()}
			}
		case trace.EventLabel:
			if !w["running"] {
				continue
			}
			l := ev.Label()
			labels[l.Resource.Goroutine()] = l.Label
		case trace.EventRangeBegin, trace.EventRangeActive:
			// a range under way when a generation begins is stated again there
			// (RangeActive): it opens one only where none is open (one begun before the trace)
			again := ev.Kind() == trace.EventRangeActive
			rg := ev.Range()
			switch {
			case strings.HasPrefix(rg.Name, "stop-the-world (") && w["stw"]:
				if _, open := stwOpen[ev.Goroutine()]; !(again && open) {
					kind := strings.TrimSuffix(strings.TrimPrefix(rg.Name, "stop-the-world ("), ")")
					stwOpen[ev.Goroutine()] = stw{start: now, kind: kind, g: ev.Goroutine()}
				}
			case rg.Name == "GC concurrent mark phase" && w["gc"]:
				if gcOpen < 0 {
					gcOpen = now
				}
			case rg.Name == "GC mark assist" && w["assist"]:
				if _, ok := assistOpen[rg.Scope.Goroutine()]; !ok {
					assistOpen[rg.Scope.Goroutine()] = now
				}
			case rg.Name == "GC incremental sweep" && w["sweep"]:
				if _, open := sweepOpen[rg.Scope.Proc()]; !(again && open) {
					sweepOpen[rg.Scope.Proc()] = openSweep{now, ev.Thread()}
				}
			}
		case trace.EventRangeEnd:
			rg := ev.Range()
			switch {
			case strings.HasPrefix(rg.Name, "stop-the-world ("):
				if o, ok := stwOpen[ev.Goroutine()]; ok {
					o.end = now
					t.stw = append(t.stw, o)
					delete(stwOpen, ev.Goroutine())
				}
			case rg.Name == "GC concurrent mark phase":
				if gcOpen >= 0 {
					t.gc = append(t.gc, span{gcOpen, now})
					gcOpen = -1
				}
			case rg.Name == "GC mark assist":
				if s, ok := assistOpen[rg.Scope.Goroutine()]; ok {
					t.assist = append(t.assist, span{s, now})
					delete(assistOpen, rg.Scope.Goroutine())
				}
			case rg.Name == "GC incremental sweep":
				if o, ok := sweepOpen[rg.Scope.Proc()]; ok {
					sw := sweep{p: rg.Scope.Proc(), m: o.m, start: o.start, end: now}
					for _, a := range ev.RangeAttributes() {
						switch a.Name {
						case "bytes swept":
							sw.swept = a.Value.Uint64()
						case "bytes reclaimed":
							sw.reclaimed = a.Value.Uint64()
						}
					}
					t.sweep = append(t.sweep, sw)
					delete(sweepOpen, rg.Scope.Proc())
				}
			}
		case trace.EventMetric:
			m := ev.Metric()
			switch m.Name {
			case "/sched/gomaxprocs:threads":
				if !w["gomaxprocs"] {
					continue
				}
				if v := m.Value.Uint64(); v != lastProcs {
					t.gomaxprocs = append(t.gomaxprocs, procsChange{now, v})
					lastProcs = v
				}
			case "/memory/classes/heap/objects:bytes":
				if !w["heap"] {
					continue
				}
				heap.t, heap.alloc = now, m.Value.Uint64()
				t.heap = append(t.heap, heap)
			case "/gc/heap/goal:bytes":
				if !w["heap"] {
					continue
				}
				heap.t, heap.goal = now, m.Value.Uint64()
				t.heap = append(t.heap, heap)
			}
		case trace.EventLog:
			if !w["logs"] {
				continue
			}
			l := ev.Log()
			t.logs = append(t.logs, logLine{now, ev.Goroutine(), ev.Thread(), l.Task, l.Category, l.Message})
		}
	}
	// what is still open at the end closes at the last event, flagged open
	for id, o := range running {
		t.running = append(t.running, interval{id, o.p, o.m, o.start, last, labels[id], true})
	}
	for _, o := range stwOpen {
		o.end = last
		t.stw = append(t.stw, o)
	}
	if gcOpen >= 0 {
		t.gc = append(t.gc, span{gcOpen, last})
	}
	for _, s := range assistOpen {
		t.assist = append(t.assist, span{s, last})
	}
	for p, o := range sweepOpen {
		t.sweep = append(t.sweep, sweep{p: p, m: o.m, start: o.start, end: last, open: true})
	}
	return t, nil
}

func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// vmHWMKiB is the process's peak resident set (the kernel's high-water mark), in KiB.
func vmHWMKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

type report struct {
	Read     int   `json:"read"`
	Events   int64 `json:"events"`
	Running  int   `json:"running_intervals"`
	STW      int   `json:"stw"`
	GC       int   `json:"gc"`
	Procs    int   `json:"gomaxprocs_changes"`
	Assist   int   `json:"assist"`
	Sweep    int   `json:"sweep"`
	Heap     int   `json:"heap"`
	Logs     int   `json:"logs"`
	CPUNs    int64 `json:"cpu_ns"`
	WallNs   int64 `json:"wall_ns"`
	VmHWMKiB int64 `json:"vm_hwm_kib,omitempty"`
}

func main() {
	repeat := flag.Int("repeat", 1, "read the trace this many times in one process")
	tablesFlag := flag.String("tables", "stw,gc,gomaxprocs,running,assist,sweep,heap,logs", "tables to build, comma-separated")
	flag.Parse()
	w := want{}
	for _, t := range strings.Split(*tablesFlag, ",") {
		w[strings.TrimSpace(t)] = true
	}
	if flag.NArg() != 1 || *repeat < 1 {
		fmt.Fprintln(os.Stderr, "usage: gmp-tracepeer [-repeat N] TRACE")
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	for i := 1; i <= *repeat; i++ {
		c0, w0 := cpuNs(), time.Now()
		t, err := read(flag.Arg(0), w)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gmp-tracepeer:", err)
			os.Exit(1)
		}
		rep := report{
			Read: i, Events: t.events, Running: len(t.running), STW: len(t.stw), GC: len(t.gc),
			Procs: len(t.gomaxprocs), Assist: len(t.assist), Sweep: len(t.sweep), Heap: len(t.heap),
			Logs: len(t.logs), CPUNs: cpuNs() - c0, WallNs: time.Since(w0).Nanoseconds(),
		}
		if i == *repeat {
			rep.VmHWMKiB = vmHWMKiB()
		}
		if err := enc.Encode(rep); err != nil {
			os.Exit(1)
		}
	}
}
