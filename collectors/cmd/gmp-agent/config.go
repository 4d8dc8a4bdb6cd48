package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// config is the command line.
type config struct {
	root    string
	node    string
	cluster string
	out     string
	sampler string

	api       string // https://host:port of the API server ("" with --watch-cgroup only)
	tokenFile string
	caFile    string
	listEvery time.Duration

	watch      multiFlag // NAME=SPEC: cgroups watched without the API
	watchEvery time.Duration

	trig trigger

	capture       time.Duration
	interval      time.Duration
	fifo          bool
	perHour       int
	cooldown      time.Duration
	maxConcurrent int
	traceTimeout  time.Duration
	maxSpool      int64
	maxTrace      int64

	metricsAddr string // "": no metrics server
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func (c *config) register(fs *flag.FlagSet) {
	api := ""
	if h, p := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"); h != "" && p != "" {
		api = "https://" + h + ":" + p
	}
	fs.StringVar(&c.root, "root", "/sys/fs/cgroup", "the node's cgroup mount (in the DaemonSet: the hostPath mount)")
	fs.StringVar(&c.node, "node", os.Getenv("NODE_NAME"), "the node whose pods are watched (default $NODE_NAME, from the downward API)")
	fs.StringVar(&c.cluster, "cluster", "", "the cluster's name, written into every bundle's meta.json (the store's first partition)")
	fs.StringVar(&c.out, "out", "/var/lib/gmp-agent/bundles", "directory the bundles are written under")
	fs.StringVar(&c.sampler, "sampler", "/gmp-sampler", "the gmp-sampler binary a capture runs")
	fs.StringVar(&c.api, "api", api, "API server URL (default from the in-cluster environment; give it where the "+
		"service IP is not routed from the node, e.g. https://127.0.0.1:6443)")
	fs.StringVar(&c.tokenFile, "token-file", saDir+"/token", "bearer token file (re-read at every listing: projected tokens rotate)")
	fs.StringVar(&c.caFile, "ca-file", saDir+"/ca.crt", "CA bundle the API server's certificate is checked against")
	fs.DurationVar(&c.listEvery, "list-every", 15*time.Second, "interval between listings of the node's pods")
	fs.Var(&c.watch, "watch-cgroup", "watch this cgroup as NAME=SPEC (--root relative path or "+
		"kube-container:UID:QOS:ID), without the API; repeatable")
	fs.DurationVar(&c.watchEvery, "watch-every", time.Second, "interval between reads of every watched cpu.stat")
	fs.IntVar(&c.trig.periods, "trigger-periods", 50, "the throttled share is taken over a container's last this many CFS periods")
	fs.Float64Var(&c.trig.share, "trigger-share", 0.2, "capture when at least this share of those periods ended throttled (0: off)")
	fs.Float64Var(&c.trig.frozenPerMin, "trigger-frozen", 0,
		"capture when the container's frozen CPU-seconds (throttled time, summed over CPUs) per minute reach this (0: off)")
	fs.DurationVar(&c.capture, "capture", 20*time.Second, "length of a capture (sampling and trace)")
	fs.DurationVar(&c.interval, "interval", 997*time.Microsecond, "the capture's sampling interval")
	fs.BoolVar(&c.fifo, "fifo", true, "ask for SCHED_FIFO for the capture's sampler")
	fs.IntVar(&c.perHour, "max-per-hour", 6, "captures per node per hour (the sampler costs ~5 % of a core while it runs)")
	fs.DurationVar(&c.cooldown, "workload-cooldown", 30*time.Minute, "least time between two captures of one workload")
	fs.IntVar(&c.maxConcurrent, "max-concurrent", 1, "captures at once on the node")
	fs.Int64Var(&c.maxSpool, "max-spool-bytes", 2<<30, "no capture starts while --out holds this much (0: no cap); "+
		"'gmpanalysis store put --move' empties it into a store")
	fs.Int64Var(&c.maxTrace, "max-trace-bytes", 256<<20, "a trace body is cut (and the bundle flagged) past this size")
	// a throttled, overloaded process serves its trace late (docs/kubernetes.md: the node agent)
	fs.DurationVar(&c.traceTimeout, "trace-slack", 2*time.Minute, "how long past the window the trace may take to arrive")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on /metrics at this address, "+
		"e.g. :9477 (default: none)")
}

func (c *config) validate() error {
	if c.api == "" && len(c.watch) == 0 {
		return fmt.Errorf("nothing to watch: give --api (or run in a pod) or --watch-cgroup NAME=SPEC")
	}
	if c.api != "" && c.node == "" {
		return fmt.Errorf("--node is empty (set NODE_NAME from the downward API's spec.nodeName)")
	}
	if c.watchEvery < 100*time.Millisecond {
		return fmt.Errorf("--watch-every %v: at least 100ms (the counters are cumulative; the trigger needs seconds)", c.watchEvery)
	}
	if c.trig.periods < 2 {
		return fmt.Errorf("--trigger-periods %d: at least 2", c.trig.periods)
	}
	if c.trig.share < 0 || c.trig.share > 1 {
		return fmt.Errorf("--trigger-share %v: a share in [0, 1]", c.trig.share)
	}
	if c.trig.share == 0 && c.trig.frozenPerMin <= 0 {
		return fmt.Errorf("no trigger: give --trigger-share or --trigger-frozen")
	}
	if c.capture < time.Second || c.interval < 10*time.Microsecond {
		return fmt.Errorf("--capture %v (at least 1s) / --interval %v (at least 10µs)", c.capture, c.interval)
	}
	if c.listEvery <= 0 || c.cooldown < 0 || c.maxSpool < 0 || c.maxTrace <= 0 || c.traceTimeout < 0 {
		return fmt.Errorf("--list-every %v (> 0), --workload-cooldown %v (>= 0), --max-spool-bytes %d (>= 0), "+
			"--max-trace-bytes %d (> 0), --trace-slack %v (>= 0): one is out of range",
			c.listEvery, c.cooldown, c.maxSpool, c.maxTrace, c.traceTimeout)
	}
	if c.perHour < 0 || c.maxConcurrent < 1 {
		return fmt.Errorf("--max-per-hour %d (0: watch only) / --max-concurrent %d (at least 1)", c.perHour, c.maxConcurrent)
	}
	return nil
}
