package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/bundle"
	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

// The CFS limits of every target as a time series (--limits-out). A Kubernetes in-place
// resize rewrites cpu.cfs_quota_us (v2: cpu.max) of a running container, and a bundle
// that knew only the limits at the start would judge every later period against the
// wrong quota.
//
// The kernel applies a write at once (kernel/sched/core.c tg_set_cfs_bandwidth): it
// refills the group's runtime to the new quota, unthrottles every throttled run queue
// (throttled_time is credited at the write, mid-period, and that period is not counted in
// nr_throttled unless the group runs out again before the boundary), and leaves the
// armed period timer alone (start_cfs_bandwidth returns when it is active). So the
// boundaries stay on the cgroup's grid, a new period takes effect from the next expiry
// already scheduled, and the period that holds a write may use what it had used plus a
// whole new quota. Measured on 6.18 (two busy threads, quota written mid-throttle): usage
// resumed within 1 ms of the write; the phase estimate (±30 µs) did not move across quota
// writes 50→100→50 ms; after a period write 100→50 ms the first boundary still came at the
// old 100 ms expiry, then every 50 ms from there; the periods holding the writes used 124,
// 150–156 and 104 ms.
//
// One row per cgroup at its first read, then one only when period, quota or burst
// changed. t_ns is the CLOCK_MONOTONIC midpoint of the read that saw the values, prev_ns
// that of the cgroup's previous read, which still saw the old ones: the change happened in
// (prev_ns, t_ns], an interval of about --limits-every.
const limitsHeader = "t_ns,prev_ns,cgroup,period_us,quota_us,burst_us\n"

// limitsSeries is the output side of --limits-out; nil in the sampler when it is off.
type limitsSeries struct {
	w       *os.File
	json    bool  // stderr: {"limits":{...}} JSON lines
	every   int64 // ns between reads; 0: every tick
	next    int64 // CLOCK_MONOTONIC ns at or after which the next read is due
	pending []byte
	sum     *limitsSummary
	lim     cgroup.Limits // scratch for each read
}

// limitsState is one target's limit files and what its last read saw.
type limitsState struct {
	r        *cgroup.LimitsReader
	last     cgroup.Limits
	lastT    int64 // t_ns of the last read; 0 before the first
	csvName  []byte
	jsonName []byte
}

func newLimitsState(r *cgroup.LimitsReader, name string) *limitsState {
	j, _ := json.Marshal(name) // a string always marshals
	return &limitsState{r: r, csvName: []byte(csvField(name)), jsonName: j}
}

// csvField quotes a field as RFC 4180 does when it holds a comma, a quote or a line break
// (no cgroup path the kubelet makes does; a --cgroup NAME might).
func csvField(s string) string {
	if !strings.ContainsAny(s, ",\"\r\n") {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// openLimitsSeries opens what --limits-out asks for: "stderr" for JSON lines, else a CSV
// file appended to (header only when new, so a restarted sampler continues the file).
func openLimitsSeries(dest string, every int64, sum *limitsSummary) (*limitsSeries, error) {
	ls := &limitsSeries{every: every, pending: make([]byte, 0, 1<<14), sum: sum}
	if dest == "stderr" {
		ls.w, ls.json = os.Stderr, true
		return ls, nil
	}
	if _, err := bundle.DropCutLine(dest, limitsHeader); err != nil {
		return nil, fmt.Errorf("limits output: %w", err)
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("limits output: %w", err)
	}
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() == 0 {
		if _, err := f.WriteString(limitsHeader); err != nil {
			f.Close()
			return nil, fmt.Errorf("limits output: %w", err)
		}
	}
	ls.w = f
	return ls, nil
}

func (ls *limitsSeries) close() {
	if !ls.json {
		ls.w.Close()
	}
}

// due says whether a read is due at now (CLOCK_MONOTONIC ns) and, if so, moves the next
// one onto the grid start + k·every past now: reads skipped by a late tick are not made up.
func (ls *limitsSeries) due(now int64) bool {
	if ls.every <= 0 {
		return true
	}
	if now < ls.next {
		return false
	}
	ls.next += (now-ls.next)/ls.every*ls.every + ls.every
	return true
}

// observe records one read of st that saw l at tNs: a row at the cgroup's first read and
// whenever a value differs from the previous read's.
func (ls *limitsSeries) observe(st *limitsState, tNs int64, l *cgroup.Limits) {
	ls.sum.Reads++
	if st.lastT != 0 && *l == st.last {
		st.lastT = tNs
		return
	}
	if ls.json {
		ls.pending = appendLimitsJSON(ls.pending, st.jsonName, tNs, st.lastT, l)
	} else {
		ls.pending = appendLimitsRow(ls.pending, st.csvName, tNs, st.lastT, l)
	}
	ls.sum.Rows++
	if st.lastT != 0 {
		ls.sum.Changes++
	}
	st.last, st.lastT = *l, tNs
}

// flush writes the queued rows with one write(2).
func (ls *limitsSeries) flush() error {
	if len(ls.pending) == 0 {
		return nil
	}
	_, err := ls.w.Write(ls.pending)
	ls.pending = ls.pending[:0]
	return err
}

// appendLimitsRow appends one limits.csv row; prevNs 0 (no previous read) and a quota of
// cgroup.NoQuota are written as empty fields.
func appendLimitsRow(b, name []byte, tNs, prevNs int64, l *cgroup.Limits) []byte {
	b = strconv.AppendInt(b, tNs, 10)
	b = append(b, ',')
	if prevNs != 0 {
		b = strconv.AppendInt(b, prevNs, 10)
	}
	b = append(b, ',')
	b = append(b, name...)
	b = append(b, ',')
	b = strconv.AppendUint(b, l.PeriodUs, 10)
	b = append(b, ',')
	if l.QuotaUs != cgroup.NoQuota {
		b = strconv.AppendInt(b, l.QuotaUs, 10)
	}
	b = append(b, ',')
	b = strconv.AppendUint(b, l.BurstUs, 10)
	return append(b, '\n')
}

// appendLimitsJSON appends the same row as one {"limits":{...}} JSON line (null for an
// empty prev_ns or quota_us), for a collector that reads the sampler's stderr.
func appendLimitsJSON(b, jsonName []byte, tNs, prevNs int64, l *cgroup.Limits) []byte {
	b = append(b, `{"limits":{"t_ns":`...)
	b = strconv.AppendInt(b, tNs, 10)
	b = append(b, `,"prev_ns":`...)
	if prevNs != 0 {
		b = strconv.AppendInt(b, prevNs, 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"cgroup":`...)
	b = append(b, jsonName...)
	b = append(b, `,"period_us":`...)
	b = strconv.AppendUint(b, l.PeriodUs, 10)
	b = append(b, `,"quota_us":`...)
	if l.QuotaUs != cgroup.NoQuota {
		b = strconv.AppendInt(b, l.QuotaUs, 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"burst_us":`...)
	b = strconv.AppendUint(b, l.BurstUs, 10)
	return append(b, "}}\n"...)
}
