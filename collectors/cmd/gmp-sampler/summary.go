package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

type summary struct {
	Cgroups        []map[string]any   `json:"cgroups"`
	IntervalNs     int64              `json:"interval_ns"`
	Policy         string             `json:"policy"`
	PolicyError    string             `json:"policy_error,omitempty"`
	MonoStartNs    int64              `json:"mono_start_ns"`
	MonoEndNs      int64              `json:"mono_end_ns"`
	Ticks          uint64             `json:"ticks"`
	Rows           uint64             `json:"rows"`
	Missed         uint64             `json:"missed_ticks"`
	ReadErrors     uint64             `json:"read_errors"`
	LateP50Ns      int64              `json:"lateness_p50_ns"`
	LateP99Ns      int64              `json:"lateness_p99_ns"`
	LateMaxNs      int64              `json:"lateness_max_ns"`
	ReadP50Ns      int64              `json:"read_p50_ns"`
	ReadP99Ns      int64              `json:"read_p99_ns"`
	CPUPctOfCore   float64            `json:"cpu_pct_of_one_core"`
	HostStat       string             `json:"host_stat,omitempty"`
	HostStatErrors uint64             `json:"host_stat_errors,omitempty"`
	LimitsSeries   *limitsSummary     `json:"limits_series,omitempty"` // --limits-out only
	UserHZ         uint64             `json:"user_hz,omitempty"`
	Kernel         string             `json:"kernel,omitempty"` // uname -r of the node (the kernel's CFS rules change with it)
	NCPU           int                `json:"ncpu"`             // CPUs this process may run on (the node's, in the DaemonSet)
	StopReason     string             `json:"stop_reason"`
	Error          *cgroup.ErrorFacts `json:"error,omitempty"` // why a read stopped the run (exit 4), as facts
	SamplerVersion string             `json:"sampler_go_version"`
}

// limitsSummary counts the --limits-out series: reads of every target's limit files
// (one per cgroup per due tick), rows written (first reads and changes) and changes alone.
type limitsSummary struct {
	Out     string `json:"out"`
	EveryNs int64  `json:"every_ns"`
	Reads   uint64 `json:"reads"`
	Rows    uint64 `json:"rows"`
	Changes uint64 `json:"changes"`
}

// newSummary is the summary before the run: what is sampled and how. The scheduling
// policy is left to prepareSamplingThread, the counters to the loop.
func newSummary(c *config, targets []*target, hs *hostStat) summary {
	sum := summary{IntervalNs: c.interval.Nanoseconds(), SamplerVersion: runtime.Version(), HostStat: c.hostStat,
		Kernel: kernelRelease(), NCPU: runtime.NumCPU()}
	if hs != nil {
		sum.UserHZ = hs.userHz
	}
	if c.limitsOut != "" {
		sum.LimitsSeries = &limitsSummary{Out: c.limitsOut, EveryNs: c.limitsEvery.Nanoseconds()}
	}
	for _, t := range targets {
		sum.Cgroups = append(sum.Cgroups, cgroupInfo(t))
	}
	return sum
}

// addReads records in info (a target's entry of the summary's cgroups) every key of the
// first and the last read the loop made of it, the ones the rows leave out included
// (nice_usec, core_sched.force_idle_usec and keys of later kernels): stat_first and
// stat_last (cpu.stat, in the kernel's units), stat_local_first and stat_local_last
// (cpu.stat.local) and pressure_first and pressure_last ({"some_total_us", "full_total_us":
// cpu.pressure's totals, µs; full null where the kernel writes no full line}) where it
// has those files. Nothing without a read. The loop kept the bytes (rawRead) and parsed
// them already; were a parse here to fail, <key>_error would say why instead.
func addReads(info map[string]any, t *target) {
	if t.reads == 0 {
		return
	}
	put := func(key string, v any, err error) {
		if err != nil {
			info[key+"_error"] = err.Error()
			return
		}
		info[key] = v
	}
	for _, r := range []struct {
		when string
		raw  *rawRead
	}{{"first", &t.first}, {"last", &t.last}} {
		m, err := keyed(t.StatPath, r.raw.stat)
		put("stat_"+r.when, m, err)
		if t.HasLocal() {
			m, err := keyed(t.LocalPath(), r.raw.local)
			put("stat_local_"+r.when, m, err)
		}
		if t.HasPSI() {
			var st cgroup.Stat
			err := cgroup.ParsePressure(t.PressurePath(), r.raw.pressure, &st)
			p := map[string]any{"some_total_us": st.PSISome, "full_total_us": nil}
			if st.HasPSIFull {
				p["full_total_us"] = st.PSIFull
			}
			put("pressure_"+r.when, p, err)
		}
	}
}

// keyed is every "key value" of a keyed file's bytes.
func keyed(path string, data []byte) (map[string]uint64, error) {
	fields, err := cgroup.ParseKeyed(path, data)
	if err != nil {
		return nil, err
	}
	m := make(map[string]uint64, len(fields))
	for _, f := range fields {
		m[f.Key] = f.Value
	}
	return m, nil
}

// kernelRelease is uname -r ("" if uname fails): a container shares the node's kernel.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// cgroupInfo describes one target for the summary.
func cgroupInfo(t *target) map[string]any {
	c := map[string]any{"name": t.name, "path": t.Rel, "version": t.Version, "cpu_stat": t.StatPath}
	if t.UsagePath != "" {
		c["cpuacct_usage"] = t.UsagePath
	}
	if t.HasPSI() {
		c["cpu_pressure"] = t.PressurePath()
	}
	if t.HasLocal() {
		c["cpu_stat_local"] = t.LocalPath()
	}
	// the CPUs its threads may run on (a cpuset, taskset): the CPUs the quota can be spent
	// on at once, and the ones the Go runtime counts
	if n := cgroup.CPUs(t.Dir); n > 0 {
		c["cpus"] = n
	}
	// The bandwidth settings in force at the start, as the kernel has them: a collector
	// records these rather than deriving them from a pod spec (the kubelet may set
	// another period, and limits change in place).
	if l, err := cgroup.ReadLimits(t.Dir, t.Version); err != nil {
		c["limits_error"] = err.Error()
	} else {
		lim := map[string]any{"period_us": l.PeriodUs, "quota_us": nil, "burst_us": l.BurstUs}
		if l.QuotaUs != cgroup.NoQuota {
			lim["quota_us"] = l.QuotaUs
		}
		c["limits"] = lim
	}
	return c
}

// writeStart writes one {"start":{...}} JSON line (--summary stderr): the facts a
// collector needs even if this process is killed before its summary: what is sampled, the
// policy it got, the first deadline (the grid start + k·interval).
func writeStart(w io.Writer, sum *summary) {
	b, _ := json.Marshal(map[string]any{"start": map[string]any{
		"cgroups": sum.Cgroups, "interval_ns": sum.IntervalNs, "policy": sum.Policy,
		"policy_error": sum.PolicyError, "mono_start_ns": sum.MonoStartNs, "user_hz": sum.UserHZ,
		"sampler_go_version": sum.SamplerVersion, "kernel": sum.Kernel, "ncpu": sum.NCPU,
	}})
	w.Write(append(b, '\n'))
}

// writeFailure reports a run that could not start where dest (--summary) says: "" not at
// all, "stderr" as one {"error":{...}} JSON line to w, else as a JSON file holding the
// error and stop_reason "not started".
func writeFailure(w io.Writer, dest string, err error) error {
	facts := cgroup.Facts(err)
	switch dest {
	case "":
		return nil
	case "stderr":
		b, _ := json.Marshal(map[string]any{"error": facts})
		_, werr := w.Write(append(b, '\n'))
		return werr
	}
	b, _ := json.MarshalIndent(map[string]any{"error": facts, "stop_reason": "not started"}, "", "  ")
	return os.WriteFile(dest, append(b, '\n'), 0o644)
}

// writeReport writes the closing prose line to w and the summary where dest says: "" not
// at all, "stderr" as one {"summary":{...}} JSON line to w, else as an indented JSON file.
func writeReport(w io.Writer, sum *summary, interval time.Duration, dest string) error {
	fmt.Fprintf(w,
		"gmp-sampler: %d rows in %.2fs at %v, %s; wake-up lateness p50 %.0fµs p99 %.0fµs max %.0fµs; "+
			"missed ticks %d; own CPU %.2f%% of one core; stop: %s\n",
		sum.Rows, float64(sum.MonoEndNs-sum.MonoStartNs)/1e9, interval, sum.Policy,
		float64(sum.LateP50Ns)/1e3, float64(sum.LateP99Ns)/1e3, float64(sum.LateMaxNs)/1e3,
		sum.Missed, sum.CPUPctOfCore, sum.StopReason)
	if l := sum.LimitsSeries; l != nil {
		fmt.Fprintf(w, "gmp-sampler: limits read %d times, %d rows (%d changes) to %s\n", l.Reads, l.Rows, l.Changes, l.Out)
	}
	switch dest {
	case "":
		return nil
	case "stderr":
		// one JSON line a collector reading stderr can tell from the prose above
		b, _ := json.Marshal(map[string]any{"summary": sum})
		w.Write(append(b, '\n'))
		return nil
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	return os.WriteFile(dest, append(b, '\n'), 0o644)
}
