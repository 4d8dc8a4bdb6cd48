package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

func TestAppendLimits(t *testing.T) {
	first := cgroup.Limits{Version: 1, PeriodUs: 100_000, QuotaUs: cgroup.NoQuota, BurstUs: 0}
	changed := cgroup.Limits{Version: 1, PeriodUs: 50_000, QuotaUs: 150_000, BurstUs: 20_000}
	st := newLimitsState(nil, `pod "a",b`)
	if got := string(appendLimitsRow(nil, st.csvName, 1000, 0, &first)); got != "1000,,\"pod \"\"a\"\",b\",100000,,0\n" {
		t.Errorf("first CSV row %q", got)
	}
	st = newLimitsState(nil, "kubepods/pod1/c")
	if got := string(appendLimitsRow(nil, st.csvName, 2000, 1000, &changed)); got != "2000,1000,kubepods/pod1/c,50000,150000,20000\n" {
		t.Errorf("changed CSV row %q", got)
	}
	type row struct {
		Limits struct {
			TNs      int64  `json:"t_ns"`
			PrevNs   *int64 `json:"prev_ns"`
			Cgroup   string `json:"cgroup"`
			PeriodUs uint64 `json:"period_us"`
			QuotaUs  *int64 `json:"quota_us"`
			BurstUs  uint64 `json:"burst_us"`
		} `json:"limits"`
	}
	line := appendLimitsJSON(nil, st.jsonName, 1000, 0, &first)
	want := `{"limits":{"t_ns":1000,"prev_ns":null,"cgroup":"kubepods/pod1/c","period_us":100000,"quota_us":null,"burst_us":0}}` + "\n"
	if string(line) != want {
		t.Errorf("first JSON line %s", line)
	}
	var r row
	line = appendLimitsJSON(nil, newLimitsState(nil, "a\"\\\n").jsonName, 2000, 1000, &changed)
	if err := json.Unmarshal(line, &r); err != nil || r.Limits.Cgroup != "a\"\\\n" || *r.Limits.PrevNs != 1000 ||
		*r.Limits.QuotaUs != 150_000 || r.Limits.PeriodUs != 50_000 || r.Limits.BurstUs != 20_000 ||
		strings.Count(string(line), "\n") != 1 {
		t.Errorf("changed JSON line %s: %+v %v", line, r, err)
	}
}

func TestLimitsDue(t *testing.T) {
	ls := &limitsSeries{every: 10, next: 100}
	for _, c := range []struct {
		now      int64
		due      bool
		nextThen int64
	}{{99, false, 100}, {100, true, 110}, {105, false, 110}, {137, true, 140}, {140, true, 150}} {
		if got := ls.due(c.now); got != c.due || ls.next != c.nextThen {
			t.Fatalf("now %d: due %v next %d, want %v %d", c.now, got, ls.next, c.due, c.nextThen)
		}
	}
	every := &limitsSeries{every: 0}
	if !every.due(1) || !every.due(1) {
		t.Error("--limits-every 0 is not due at every tick")
	}
}

// limitsRows reads a limits CSV: its header and rows.
func limitsRows(t *testing.T, path string) (string, [][]string) {
	t.Helper()
	return readRows(t, path)
}

// TestLimitsChangeBetweenReads: a limit rewritten between two reads gives one row whose
// prev_ns is the t_ns of the last read that saw the old value; reads that see nothing new
// give none.
func TestLimitsChangeBetweenReads(t *testing.T) {
	lim := filepath.Join(t.TempDir(), "limits.csv")
	s, sum, _, root := newTestSampler(t, "--cgroup", "g", "--limits-out", lim, "--limits-every", "0")
	st := s.targets[0].lim
	for i := 0; i < 3; i++ {
		if _, ok := s.readLimits(); !ok {
			t.Fatalf("read %d: %s", i, sum.StopReason)
		}
	}
	lastOld := st.lastT
	if err := os.WriteFile(filepath.Join(root, "g", "cpu.max"), []byte("max 50000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.readLimits(); !ok {
		t.Fatal(sum.StopReason)
	}
	if _, ok := s.readLimits(); !ok { // unchanged again: no row
		t.Fatal(sum.StopReason)
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	hdr, rows := limitsRows(t, lim)
	if hdr+"\n" != limitsHeader || len(rows) != 2 {
		t.Fatalf("header %q, rows %q", hdr, rows)
	}
	if r := rows[0]; r[1] != "" || r[2] != "g" || strings.Join(r[3:], ",") != "100000,50000,0" {
		t.Errorf("first row %q", r)
	}
	r := rows[1]
	tNs, _ := strconv.ParseInt(r[0], 10, 64)
	prev, _ := strconv.ParseInt(r[1], 10, 64)
	if prev != lastOld || tNs <= prev || r[2] != "g" || strings.Join(r[3:], ",") != "50000,,0" {
		t.Errorf("change row %q, want prev_ns %d (the last read of the old value)", r, lastOld)
	}
	if l := sum.LimitsSeries; l.Reads != 5 || l.Rows != 2 || l.Changes != 1 || l.Out != lim || l.EveryNs != 0 {
		t.Errorf("limits summary %+v", *l)
	}
}

// TestSamplerLimitsInTheLoop: in a run, the limits are read after the cpu.stat reads of a
// due tick (every tick with 0, about every --limits-every else); one row per cgroup when
// nothing changes; the cgroup column is written even with one target.
func TestSamplerLimitsInTheLoop(t *testing.T) {
	for _, c := range []struct {
		every     string
		min, max  func(ticks uint64) uint64
		nTargets  int
		cgroupArg []string
	}{
		{"0", func(n uint64) uint64 { return n }, func(n uint64) uint64 { return n }, 1, []string{"--cgroup", "g"}},
		{"10ms", func(uint64) uint64 { return 2 }, func(uint64) uint64 { return 4 }, 2,
			[]string{"--cgroup", "a=g", "--cgroup", "b=g"}},
	} {
		t.Run(c.every, func(t *testing.T) {
			lim := filepath.Join(t.TempDir(), "limits.csv")
			args := append([]string{"--interval", "1ms", "--limits-out", lim, "--limits-every", c.every}, c.cgroupArg...)
			s, sum, out, _ := newTestSampler(t, args...)
			s.begin(30 * time.Millisecond)
			s.run()
			s.finish()
			if sum.StopReason != "duration" || s.exitCode() != 0 {
				t.Fatalf("stop %q exit %d", sum.StopReason, s.exitCode())
			}
			perTarget := sum.LimitsSeries.Reads / uint64(c.nTargets)
			if perTarget < c.min(sum.Ticks) || perTarget > c.max(sum.Ticks) {
				t.Errorf("%d limits reads per target in %d ticks", perTarget, sum.Ticks)
			}
			_, rows := limitsRows(t, lim)
			if len(rows) != c.nTargets || sum.LimitsSeries.Rows != uint64(c.nTargets) || sum.LimitsSeries.Changes != 0 {
				t.Fatalf("rows %q, summary %+v", rows, *sum.LimitsSeries)
			}
			_, stat := readRows(t, out)
			first, _ := strconv.ParseInt(stat[0][0], 10, 64)
			for _, r := range rows {
				tNs, _ := strconv.ParseInt(r[0], 10, 64)
				// after the first tick's cpu.stat reads
				if r[1] != "" || tNs <= first || strings.Join(r[3:], ",") != "100000,50000,0" {
					t.Errorf("row %q (first cpu.stat row at %d)", r, first)
				}
			}
			if c.nTargets == 1 && rows[0][2] != "g" {
				t.Errorf("cgroup column %q with one target", rows[0][2])
			}
		})
	}
}

// TestSamplerStopsOnBadLimits: a limit file that stops parsing stops the run as bad cgroup
// data (exit 4), like cpu.stat, and writes no row for it.
func TestSamplerStopsOnBadLimits(t *testing.T) {
	lim := filepath.Join(t.TempDir(), "limits.csv")
	s, sum, _, root := newTestSampler(t, "--cgroup", "g", "--interval", "1ms", "--limits-out", lim, "--limits-every", "0")
	if err := os.WriteFile(filepath.Join(root, "g", "cpu.max"), []byte("0 100000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.begin(time.Second)
	s.run()
	s.finish()
	if !strings.HasPrefix(sum.StopReason, "bad cgroup data: ") || !strings.Contains(sum.StopReason, "cpu.max") ||
		sum.ReadErrors != 1 || s.exitCode() != 4 || sum.LimitsSeries.Rows != 0 {
		t.Errorf("stop %q, read errors %d, exit %d, limits %+v", sum.StopReason, sum.ReadErrors, s.exitCode(), *sum.LimitsSeries)
	}
	if hdr, rows := limitsRows(t, lim); hdr+"\n" != limitsHeader || len(rows) != 0 {
		t.Errorf("header %q rows %q", hdr, rows)
	}
}

// TestLimitsRefusedAtOpen: limit files that do not parse at the start refuse the target
// (exit 2 in main), before any row.
func TestLimitsRefusedAtOpen(t *testing.T) {
	root := v2Tree(t)
	if err := os.WriteFile(filepath.Join(root, "g", "cpu.max.burst"), []byte("-5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	if _, err := openTargets(&log, root, []string{"g"}, false); err != nil {
		t.Fatalf("without --limits-out: %v", err)
	}
	_, err := openTargets(&log, root, []string{"g"}, true)
	if err == nil || !strings.Contains(err.Error(), "cpu.max.burst") {
		t.Fatalf("error %v", err)
	}
}

// TestLimitsToStderrAsJSON: the JSON-lines form (--limits-out stderr), one line per row.
func TestLimitsToStderrAsJSON(t *testing.T) {
	s, sum, _, root := newTestSampler(t, "--cgroup", "g", "--limits-out", filepath.Join(t.TempDir(), "unused.csv"))
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s.ls.w.Close()
	s.ls.w, s.ls.json = f, true // what openLimitsSeries("stderr") sets, on a file
	s.readLimits()
	if err := os.WriteFile(filepath.Join(root, "g", "cpu.max"), []byte("75000 100000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.readLimits()
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(f.Name())
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 || sum.LimitsSeries.Changes != 1 {
		t.Fatalf("lines %q", lines)
	}
	var m []map[string]map[string]any
	for _, l := range lines {
		var v map[string]map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		m = append(m, v)
	}
	if m[0]["limits"]["prev_ns"] != nil || m[0]["limits"]["quota_us"] != 50000.0 ||
		m[1]["limits"]["prev_ns"] != m[0]["limits"]["t_ns"] || m[1]["limits"]["quota_us"] != 75000.0 ||
		m[1]["limits"]["cgroup"] != "g" {
		t.Errorf("lines %v", m)
	}
}

func TestRunWithLimitsAllocatesNothing(t *testing.T) {
	lim := filepath.Join(t.TempDir(), "limits.csv")
	s, sum, _, _ := newTestSampler(t, "--cgroup", "g", "--interval", "1ms", "--flush", "0", "--limits-out", lim, "--limits-every", "0")
	allocs := testing.AllocsPerRun(5, func() {
		s.begin(3 * time.Millisecond)
		s.run()
	})
	if allocs != 0 || sum.LimitsSeries.Reads == 0 {
		t.Errorf("%v allocations per 3 ms run (%d limits reads)", allocs, sum.LimitsSeries.Reads)
	}
}

func TestReportCountsLimits(t *testing.T) {
	sum := testSummary()
	sum.LimitsSeries = &limitsSummary{Out: "l.csv", EveryNs: 10_000_000, Reads: 500, Rows: 3, Changes: 2}
	var b strings.Builder
	if err := writeReport(&b, sum, 997*time.Microsecond, "stderr"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	var m map[string]map[string]any
	if len(lines) != 3 || lines[1] != "gmp-sampler: limits read 500 times, 3 rows (2 changes) to l.csv" ||
		json.Unmarshal([]byte(lines[2]), &m) != nil {
		t.Fatalf("report %q", b.String())
	}
	want := map[string]any{"out": "l.csv", "every_ns": 1e7, "reads": 500.0, "rows": 3.0, "changes": 2.0}
	got, _ := m["summary"]["limits_series"].(map[string]any)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("limits_series %v, want %v", got, want)
			break
		}
	}
}
