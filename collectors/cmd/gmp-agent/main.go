// gmp-agent watches every container with a CPU limit on its node and captures a bundle when
// one is throttled: the node agent of a fleet.
//
// Watching is cheap: the CFS counters in cpu.stat are cumulative, so one read of each
// container's and pod's cpu.stat a second (--watch-every) tells how many periods ran and how
// many of them ended throttled, and how much CPU time was frozen, over any past span. When a
// container crosses a trigger (trigger.go: the throttled share of its last --trigger-periods
// periods, or its frozen CPU-seconds per minute) and the rate limits allow (per node and per
// workload), the agent captures: it runs gmp-sampler (the one cgroup reader, beside this
// binary in the image) at 997 µs on the container's and the pod's cgroup for --capture,
// fetches a Go execution trace over the same window from the port the pod names in its
// gmpanalysis/pprof-port annotation, and writes a bundle (capture.go, meta.go) under --out.
// The bundle's files are appended and flushed as they come, and meta.json (checked against
// the bundle schema) is valid from the first second: a crash, or a container that goes away
// mid-capture, leaves a loadable bundle flagged incomplete. `gmpanalysis store put` moves
// finished bundles into a store.
//
// Targets come from the API server (kube.go: the pods of --node, listed with a spec.nodeName
// field selector; RBAC: list pods, nothing else) or, without one, from --watch-cgroup (a
// node without Kubernetes, and the lab benchmark of the agent's cost).
//
// The agent writes JSON lines on stdout, one per event, for whoever reads them (nothing
// parses prose): started, watch, unwatchable, trigger, skip (with its kind), capture_start,
// capture, recovered, error, stopped.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	var cfg config
	cfg.register(flag.CommandLine)
	flag.Parse()
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "gmp-agent: %v\n", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	a, err := newAgent(&cfg, newEvents(os.Stdout))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gmp-agent: %v\n", err)
		os.Exit(2)
	}
	if err := a.run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "gmp-agent: %v\n", err)
		os.Exit(1)
	}
}
