package main

import (
	"flag"
	"fmt"
	"strings"
	"time"
)

// config is the command line.
type config struct {
	root      string
	cgroups   multiFlag
	interval  time.Duration
	duration  time.Duration
	out       string
	fifo      bool
	fifoPrio  int
	summary   string // "", a file, or "stderr"
	hostStat  string // "", a CSV file, or "stderr"
	hostEvery time.Duration
	idle      bool
	flush     time.Duration
	// stopOnStdin: the run also ends at the first byte on stdin or at its end
	stopOnStdin bool
	// limitsOut: "", a CSV file, or "stderr"; limitsEvery: between reads of the limit
	// files (0: at every tick)
	limitsOut   string
	limitsEvery time.Duration
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// register defines the flags on fs, with c's fields as their destinations.
func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.root, "root", "/sys/fs/cgroup", "cgroup mount root (v1: holds cpu/ and cpuacct/; v2: the unified mount)")
	fs.Var(&c.cgroups, "cgroup", "cgroup to sample as [NAME=]PATH relative to the root (repeatable; several add a `cgroup` column)")
	fs.DurationVar(&c.interval, "interval", 997*time.Microsecond,
		"sampling interval; one that does not divide the 100 ms CFS period sweeps the period boundary and pins its phase")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long (0: until SIGINT/SIGTERM)")
	fs.StringVar(&c.out, "out", "-", "CSV output file, appended to (\"-\" = stdout)")
	fs.BoolVar(&c.fifo, "fifo", false, "run the sampling thread under SCHED_FIFO (needs root and the root cpu cgroup when RT group scheduling is on)")
	fs.IntVar(&c.fifoPrio, "fifo-prio", 10, "SCHED_FIFO priority")
	fs.StringVar(&c.summary, "summary", "", "write a JSON summary of the run to this file (\"stderr\": one {\"summary\":{...}} JSON line on stderr)")
	fs.StringVar(&c.hostStat, "host-stat", "",
		"also read the host's /proc/stat (steal time) about once a --host-stat-every and append rows to this CSV file "+
			"(\"stderr\": one {\"host_stat\":{...}} JSON line per read on stderr; \"\": off)")
	fs.DurationVar(&c.hostEvery, "host-stat-every", time.Second, "interval between /proc/stat reads")
	fs.BoolVar(&c.idle, "idle", false, "do nothing until SIGTERM (the main process of a DaemonSet pod that collectors exec into)")
	fs.StringVar(&c.limitsOut, "limits-out", "",
		"also read every target's CFS limits (period, quota, burst) about once a --limits-every, after that tick's "+
			"cpu.stat reads, and append a row to this CSV file at the first read and at every change "+
			"(\"stderr\": one {\"limits\":{...}} JSON line per row on stderr; \"\": off)")
	fs.DurationVar(&c.limitsEvery, "limits-every", 10*time.Millisecond,
		"interval between reads of the limit files (0: at every sampling tick); a change is dated to within it")
	fs.BoolVar(&c.stopOnStdin, "stop-on-stdin", false,
		"also stop at the first byte on stdin or when stdin closes (an exec through the Kubernetes API cannot signal "+
			"the process it started, but can write to its stdin); without a stdin the run ends at once")
	fs.DurationVar(&c.flush, "flush", 10*time.Millisecond,
		"write buffered rows at least this often (0: one write per row); a killed sampler loses at most this much")
}

// validate refuses a sampling run that cannot start (--idle needs none of this). The
// --host-stat-every floor is startHostStat's, checked when the host reader is opened.
func (c *config) validate() error {
	if len(c.cgroups) == 0 {
		return fmt.Errorf("no --cgroup given; example: --cgroup kubepods/burstable/pod<UID>/<containerID>")
	}
	if c.interval < 10*time.Microsecond {
		return fmt.Errorf("--interval %v is too small (minimum 10µs)", c.interval)
	}
	if c.limitsEvery < 0 {
		return fmt.Errorf("--limits-every %v is negative (0: at every tick)", c.limitsEvery)
	}
	switch {
	case c.limitsOut == "-":
		return fmt.Errorf("--limits-out -: stdout is not available (it may carry cpu.stat rows); give a file or stderr")
	case c.limitsOut != "" && c.limitsOut != "stderr" && c.limitsOut == c.out:
		return fmt.Errorf("--limits-out %s is also --out: give the limits their own file", c.limitsOut)
	case c.limitsOut != "" && c.limitsOut != "stderr" && c.limitsOut == c.hostStat:
		return fmt.Errorf("--limits-out %s is also --host-stat: give the limits their own file", c.limitsOut)
	}
	return nil
}
