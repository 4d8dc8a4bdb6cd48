// Package demoapp is gmp-demoapp, a small Go HTTP service for CFS-quota experiments; Main
// runs it. It is a module of its own so that the same source builds as several programs
// that differ only in how the Go runtime picks GOMAXPROCS, which a main module decides:
//
//	cmd/gmp-demoapp          the collectors module (go 1.26): GOMAXPROCS =
//	                         min(CPUs, max(2, ceil(quota/period))), updated while running
//	variants/go124           a module whose go line is 1.24: the toolchain keeps Go 1.24's
//	                         defaults (DefaultGODEBUG containermaxprocs=0,updatemaxprocs=0):
//	                         GOMAXPROCS = the CPUs it may run on, container limits ignored
//	variants/automaxprocs    go.uber.org/automaxprocs: GOMAXPROCS = max(1, floor(quota/period)),
//	                         set once at start
//
// Its go line (1.24) is the lowest of those modules', as Go requires of a dependency.
//
//	GET /work?ms=30&alloc_kb=0   burn `ms` milliseconds of calibrated CPU work; with
//	                             alloc_kb, also allocate that much short-lived garbage and
//	                             rewrite part of the live heap, interleaved with the work
//	                             (its handler's thread CPU time in the Gmp-Cpu-Ns header)
//	GET /info                    JSON: GOMAXPROCS, NumCPU, Go version, calibration
//	GET /debug/pprof/...         net/http/pprof, including /debug/pprof/trace
//
// Its first stdout line announces the listening address, as prose ("listening
// http://ADDR ...", the default) or, with -ready json, as one JSON object
// {"listening": {"addr": ..., and the /info facts}}. The facts include default_godebug,
// the DefaultGODEBUG its main module's go line gave it: how a build picks GOMAXPROCS is
// read from build info, not told.
//
// The work is counted in loop iterations, not wall time, so a request costs the same CPU
// whatever the quota or GOMAXPROCS; the iterations per millisecond come from --iters-per-ms
// or from a calibration against this thread's CPU clock, which throttling does not advance.
package demoapp

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof"
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

// sink receives the results of the work loops so the compiler cannot remove them. It is
// written by every /work request, and net/http serves each connection on its own
// goroutine, so concurrent requests write it at the same time: a plain `sink += x` is a
// data race (the Go memory model gives it no defined result, and `go test -race` reports
// it). An atomic add is race-free and costs a few ns once per request.
var sink atomic.Uint64

// spin runs n iterations of an xorshift loop and returns its result; the caller must use
// the result (add it to sink) or the compiler may drop the loop.
func spin(n int64) uint64 {
	x := uint64(n) | 1
	for i := int64(0); i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

func threadCPUNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// calibrate returns loop iterations per millisecond of this thread's CPU time; the best of
// a few rounds, so a preempted round does not count.
func calibrate() int64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const n = 2_000_000
	best := int64(0)
	for r := 0; r < 7; r++ {
		t0 := threadCPUNs()
		sink.Add(spin(n))
		dt := threadCPUNs() - t0
		if dt > 0 {
			if v := n * 1_000_000 / dt; v > best {
				best = v
			}
		}
	}
	return best
}

// node is a pointer-rich heap object, so the GC has pointers to trace.
type node struct {
	left, right *node
	payload     [6]uint64
}

func buildTree(depth int) *node {
	if depth == 0 {
		return nil
	}
	return &node{left: buildTree(depth - 1), right: buildTree(depth - 1)}
}

const nodeBytes = 64

// liveHeap is a set of trees kept alive for the whole run; requests replace some of them.
type liveHeap struct {
	mu    sync.Mutex
	trees []*node
}

func (h *liveHeap) replaceOne(rng *rand.Rand, depth int) {
	t := buildTree(depth)
	h.mu.Lock()
	if len(h.trees) > 0 {
		h.trees[rng.IntN(len(h.trees))] = t
	}
	h.mu.Unlock()
}

// garbage allocates about kb KiB of short-lived linked nodes; the result is for sink.
func garbage(kb int64) uint64 {
	var head *node
	for i := int64(0); i < kb*1024/nodeBytes; i++ {
		head = &node{left: head}
	}
	if head != nil {
		return head.payload[0]
	}
	return 0
}

// treeDepth: trees of depth 12 are 4095 nodes (256 KiB); 4 of them per MiB.
const treeDepth = 12

func newLiveHeap(mb int) *liveHeap {
	h := &liveHeap{}
	for i := 0; i < mb*4; i++ {
		h.trees = append(h.trees, buildTree(treeDepth))
	}
	return h
}

// app holds the service's settings; its handlers are safe for concurrent requests.
type app struct {
	ipm     int64   // loop iterations per ms of CPU
	workMs  float64 // default /work CPU
	allocKB int64   // default /work garbage
	liveMB  int
	heap    *liveHeap
	cpuHdr  bool // report each /work request's own CPU in CPUHeader
}

// CPUHeader carries the CPU time (ns, decimal) a /work request's handler ran on its own
// thread, from the start of the work to the response: the load generator records it as
// requests.csv's cpu_ns, the per-request cost the what-if replay takes.
const CPUHeader = "Gmp-Cpu-Ns"

func (a *app) routes(mux *http.ServeMux) {
	mux.HandleFunc("/work", a.work)
	mux.HandleFunc("/info", a.info)
}

func (a *app) work(w http.ResponseWriter, r *http.Request) {
	ms, kb := a.workMs, a.allocKB
	q := r.URL.Query()
	if v := q.Get("ms"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 10_000 {
			http.Error(w, "ms must be a number in [0, 10000]", http.StatusBadRequest)
			return
		}
		ms = f
	}
	if v := q.Get("alloc_kb"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 1<<20 {
			http.Error(w, "alloc_kb must be an integer in [0, 1048576]", http.StatusBadRequest)
			return
		}
		kb = n
	}
	total := int64(ms * float64(a.ipm))
	var cpu0 int64
	if a.cpuHdr {
		// CLOCK_THREAD_CPUTIME_ID counts one OS thread, and a goroutine moves between
		// threads whenever it is rescheduled; locked to its thread, a preempted handler
		// hands its P to another thread and its own thread sleeps until it runs again, so
		// the count is this handler's alone: its work, its allocation and the GC assists
		// charged to it, not the GC's background workers or other goroutines.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpu0 = threadCPUNs()
	}
	// Interleave work and allocation in chunks so GC cycles start while
	// goroutines are burning CPU, as in a real allocation-heavy service.
	const chunks = 10
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var acc uint64
	for i := 0; i < chunks; i++ {
		acc += spin(total / chunks)
		if kb > 0 {
			acc += garbage(kb / chunks)
		}
	}
	sink.Add(acc)
	if kb > 0 && a.heap != nil && len(a.heap.trees) > 0 {
		a.heap.replaceOne(rng, treeDepth-2)
	}
	if a.cpuHdr {
		w.Header().Set(CPUHeader, strconv.FormatInt(threadCPUNs()-cpu0, 10))
	}
	fmt.Fprintf(w, "ok %d\n", total)
}

// defaultGODEBUG is the DefaultGODEBUG build setting ("" if none): the GODEBUG defaults
// the main module's go line selects (a go 1.24 line gives containermaxprocs=0 and
// updatemaxprocs=0, so the container's CPU limit is ignored). GODEBUG in the environment
// overrides them at run time.
func defaultGODEBUG() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "DefaultGODEBUG" {
			return s.Value
		}
	}
	return ""
}

// facts are what /info serves (and the JSON ready line carries): read at call time, since
// Go >= 1.25 may change GOMAXPROCS while running.
func (a *app) facts() map[string]any {
	var env any
	if v, ok := os.LookupEnv("GOMAXPROCS"); ok {
		env = v
	}
	return map[string]any{
		"gomaxprocs":      runtime.GOMAXPROCS(0),
		"num_cpu":         runtime.NumCPU(),
		"go_version":      runtime.Version(),
		"pid":             os.Getpid(),
		"iters_per_ms":    a.ipm,
		"work_ms":         a.workMs,
		"alloc_kb":        a.allocKB,
		"live_mb":         a.liveMB,
		"gomaxprocs_env":  env,
		"default_godebug": defaultGODEBUG(),
	}
}

func (a *app) info(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a.facts())
}

// readyLine is the first stdout line, which launchers wait for: the address is known only
// once the socket listens.
func (a *app) readyLine(format string, addr net.Addr) (string, error) {
	switch format {
	case "text":
		return fmt.Sprintf("listening http://%s gomaxprocs=%d num_cpu=%d go=%s iters_per_ms=%d",
			addr, runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version(), a.ipm), nil
	case "json":
		f := a.facts()
		f["addr"] = addr.String()
		b, err := json.Marshal(map[string]any{"listening": f})
		return string(b), err
	}
	return "", fmt.Errorf("-ready %q: want text or json", format)
}

// Main runs the service with the command line's flags.
func Main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	workMs := flag.Float64("work-ms", 30, "default CPU work per /work request, in ms of calibrated CPU")
	allocKB := flag.Int64("alloc-kb", 0, "default garbage per /work request, KiB")
	liveMB := flag.Int("live-mb", 0, "live pointer-rich heap kept for the whole run, MiB")
	itersPerMs := flag.Int64("iters-per-ms", 0, "work calibration (0: calibrate at start)")
	cpuHdr := flag.Bool("cpu-header", true, "answer each /work request with its handler's thread CPU time in a "+CPUHeader+
		" header (the handler holds its OS thread while it runs; false: not)")
	calibrateOnly := flag.Bool("calibrate", false, "print iterations per ms of CPU and exit")
	ready := flag.String("ready", "text", "first stdout line: text (\"listening http://ADDR ...\") or json ({\"listening\": {\"addr\": ...}})")
	flag.Parse()
	if *ready != "text" && *ready != "json" {
		log.Fatalf("gmp-demoapp: -ready %q: want text or json", *ready)
	}

	ipm := *itersPerMs
	if ipm <= 0 {
		ipm = calibrate()
	}
	if *calibrateOnly {
		fmt.Println(ipm)
		return
	}

	a := &app{ipm: ipm, workMs: *workMs, allocKB: *allocKB, liveMB: *liveMB, heap: newLiveHeap(*liveMB), cpuHdr: *cpuHdr}
	a.routes(http.DefaultServeMux) // beside net/http/pprof's handlers

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("gmp-demoapp: listen %s: %v", *addr, err)
	}
	srv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
	line, err := a.readyLine(*ready, ln.Addr())
	if err != nil {
		log.Fatalf("gmp-demoapp: %v", err)
	}
	fmt.Println(line)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Fatalf("gmp-demoapp: %v", err)
	}
}
