// gmp-demoapp is a small Go HTTP service for CFS-quota experiments.
//
//	GET /work?ms=30&alloc_kb=0   burn `ms` milliseconds of calibrated CPU work; with
//	                             alloc_kb, also allocate that much short-lived garbage and
//	                             rewrite part of the live heap, interleaved with the work
//	GET /info                    JSON: GOMAXPROCS, NumCPU, Go version, calibration
//	GET /debug/pprof/...         net/http/pprof, including /debug/pprof/trace
//
// The work is counted in loop iterations, not wall time, so a request costs the same CPU
// whatever the quota or GOMAXPROCS; the iterations per millisecond come from --iters-per-ms
// or from a calibration against this thread's CPU clock, which throttling does not advance.
package main

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
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var sink uint64

// spin runs n iterations of an xorshift loop the compiler cannot remove.
func spin(n int64) {
	x := uint64(n) | 1
	for i := int64(0); i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	sink += x
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
		spin(n)
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

// garbage allocates about kb KiB of short-lived linked nodes.
func garbage(kb int64) {
	var head *node
	for i := int64(0); i < kb*1024/nodeBytes; i++ {
		head = &node{left: head}
	}
	if head != nil {
		sink += head.payload[0]
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	workMs := flag.Float64("work-ms", 30, "default CPU work per /work request, in ms of calibrated CPU")
	allocKB := flag.Int64("alloc-kb", 0, "default garbage per /work request, KiB")
	liveMB := flag.Int("live-mb", 0, "live pointer-rich heap kept for the whole run, MiB")
	itersPerMs := flag.Int64("iters-per-ms", 0, "work calibration (0: calibrate at start)")
	calibrateOnly := flag.Bool("calibrate", false, "print iterations per ms of CPU and exit")
	flag.Parse()

	ipm := *itersPerMs
	if ipm <= 0 {
		ipm = calibrate()
	}
	if *calibrateOnly {
		fmt.Println(ipm)
		return
	}

	// Trees of depth 12 are 4095 nodes (256 KiB); 4 of them per MiB.
	const depth = 12
	heap := &liveHeap{}
	for i := 0; i < *liveMB*4; i++ {
		heap.trees = append(heap.trees, buildTree(depth))
	}

	http.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		ms, kb := *workMs, *allocKB
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
		total := int64(ms * float64(ipm))
		// Interleave work and allocation in chunks so GC cycles start while
		// goroutines are burning CPU, as in a real allocation-heavy service.
		const chunks = 10
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
		for i := 0; i < chunks; i++ {
			spin(total / chunks)
			if kb > 0 {
				garbage(kb / chunks)
			}
		}
		if kb > 0 && len(heap.trees) > 0 {
			heap.replaceOne(rng, depth-2)
		}
		fmt.Fprintf(w, "ok %d\n", total)
	})
	http.HandleFunc("/info", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"gomaxprocs":   runtime.GOMAXPROCS(0),
			"num_cpu":      runtime.NumCPU(),
			"go_version":   runtime.Version(),
			"pid":          os.Getpid(),
			"iters_per_ms": ipm,
			"work_ms":      *workMs,
			"alloc_kb":     *allocKB,
			"live_mb":      *liveMB,
			"gomaxprocs_env": func() any {
				if v, ok := os.LookupEnv("GOMAXPROCS"); ok {
					return v
				}
				return nil
			}(),
		})
	})

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("gmp-demoapp: listen %s: %v", *addr, err)
	}
	srv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
	// One line on stdout that launchers wait for: the address is known only now.
	fmt.Printf("listening http://%s gomaxprocs=%d num_cpu=%d go=%s iters_per_ms=%d\n",
		ln.Addr(), runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version(), ipm)

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
