package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// v2Tree is a cgroup v2 mount holding cgroup g with the counters and limits of
// tests/data/cgroup/v2/set (ordinary files: pread at offset 0 rereads them like the
// kernel's). It returns the root.
func v2Tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	src := filepath.Join("..", "..", "..", "tests", "data", "cgroup", "v2", "set")
	if err := os.Mkdir(filepath.Join(root, "g"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cpu.stat", "cpu.max", "cpu.max.burst"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "g", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// the fixture's counters as a row writes them, after t_ns and read_ns
const fixtureCounters = "3012345,61,52,2636400,0,0"

// newTestSampler opens the specs on a fixture tree as main does, without the thread setup
// (policy, timer slack, GC) that would outlive the test.
func newTestSampler(t *testing.T, args ...string) (s *sampler, sum *summary, out, root string) {
	t.Helper()
	root = v2Tree(t)
	s, sum, out = samplerOn(t, root, args...)
	return s, sum, out, root
}

// samplerOn is newTestSampler on the cgroup mount at root.
func samplerOn(t *testing.T, root string, args ...string) (s *sampler, sum *summary, out string) {
	t.Helper()
	out = filepath.Join(t.TempDir(), "out.csv")
	c := parseConfig(t, append([]string{"--root", root, "--out", out}, args...)...)
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	targets, err := openTargets(&log, c.root, c.cgroups, c.limitsOut != "")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(log.String(), "gmp-sampler: sampling "); got != len(targets) {
		t.Errorf("log %q: %d sampling lines for %d targets", log.String(), got, len(targets))
	}
	w, cols, err := openOutput(c.out, wantColumns(targets))
	if err != nil {
		t.Fatal(err)
	}
	sm := newSummary(c, targets, nil)
	sum = &sm
	var ls *limitsSeries
	if c.limitsOut != "" {
		if ls, err = openLimitsSeries(c.limitsOut, c.limitsEvery.Nanoseconds(), sum.LimitsSeries); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		w.Close()
		for _, tg := range targets {
			tg.close()
		}
		if ls != nil {
			ls.close()
		}
	})
	return newSampler(c, targets, cols, w, nil, ls, new(atomic.Int32), sum), sum, out
}

func readRows(t *testing.T, path string) (header string, rows [][]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for _, l := range lines[1:] {
		rows = append(rows, strings.Split(l, ","))
	}
	return lines[0], rows
}

func TestSamplerRunsOnTheGrid(t *testing.T) {
	s, sum, out, _ := newTestSampler(t, "--cgroup", "g", "--interval", "1ms")
	s.begin(30 * time.Millisecond)
	s.run()
	s.finish()
	if sum.StopReason != "duration" || sum.ReadErrors != 0 || s.exitCode() != 0 {
		t.Errorf("stop %q, read errors %d, exit %d", sum.StopReason, sum.ReadErrors, s.exitCode())
	}
	// every deadline before the end is sampled or counted missed (skipping may overshoot it)
	if sum.Ticks == 0 || sum.Ticks+sum.Missed < 30 || sum.Rows != sum.Ticks {
		t.Errorf("ticks %d, missed %d, rows %d over 30 deadlines", sum.Ticks, sum.Missed, sum.Rows)
	}
	// the last deadline is start + 29 ms; the loop ends without sleeping to the 30th
	if sum.MonoEndNs < sum.MonoStartNs+29_000_000 || sum.LateP99Ns < sum.LateP50Ns || sum.ReadP50Ns <= 0 {
		t.Errorf("summary %+v", *sum)
	}
	hdr, rows := readRows(t, out)
	if hdr != csvHeader {
		t.Errorf("header %q", hdr)
	}
	if uint64(len(rows)) != sum.Rows {
		t.Fatalf("%d rows in the file, %d counted", len(rows), sum.Rows)
	}
	prev := sum.MonoStartNs
	for i, r := range rows {
		tNs, _ := strconv.ParseInt(r[0], 10, 64)
		readNs, _ := strconv.ParseInt(r[1], 10, 64)
		if len(r) != 8 || strings.Join(r[2:], ",") != fixtureCounters || tNs < prev || tNs > sum.MonoEndNs || readNs <= 0 {
			t.Fatalf("row %d: %q", i, r)
		}
		prev = tNs
	}
}

func TestSamplerSeveralTargets(t *testing.T) {
	s, sum, out, _ := newTestSampler(t, "--cgroup", "a=g", "--cgroup", "b=g", "--interval", "1ms")
	s.begin(5 * time.Millisecond)
	s.run()
	s.finish()
	hdr, rows := readRows(t, out)
	if hdr != csvHeader+",cgroup" || len(rows) == 0 || uint64(len(rows)) != 2*sum.Ticks {
		t.Fatalf("header %q, %d rows for %d ticks", hdr, len(rows), sum.Ticks)
	}
	for i, r := range rows {
		if want := []string{"a", "b"}[i%2]; len(r) != 9 || r[8] != want {
			t.Fatalf("row %d: %q, want cgroup %s", i, r, want)
		}
	}
}

func TestSamplerStopsOnBadData(t *testing.T) {
	s, sum, out, root := newTestSampler(t, "--cgroup", "g", "--interval", "1ms")
	// the same inode rewritten: the held fd reads the new text
	if err := os.WriteFile(filepath.Join(root, "g", "cpu.stat"), []byte("usage_usec x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.begin(time.Second)
	s.run()
	s.finish()
	if !strings.HasPrefix(sum.StopReason, "bad cgroup data: ") || !strings.Contains(sum.StopReason, "cpu.stat") ||
		sum.ReadErrors != 1 || sum.Rows != 0 || s.exitCode() != 4 {
		t.Errorf("stop %q, read errors %d, rows %d, exit %d", sum.StopReason, sum.ReadErrors, sum.Rows, s.exitCode())
	}
	// the same error as facts, for the collector
	if e := sum.Error; e == nil || e.Kind != "format" || e.Line != 1 || e.Path != filepath.Join(root, "g", "cpu.stat") {
		t.Errorf("error facts %+v", e)
	}
	if _, rows := readRows(t, out); len(rows) != 0 {
		t.Errorf("rows written: %q", rows)
	}
}

// TestSamplerStopsOnSignal: a stop takes one more read, after the request, so the rows
// reach past whatever the stopper waited for (the node agent stops the sampler once a
// trace's body has ended, and the bundle's rows must cover the trace), even when the
// request came while the loop was behind.
func TestSamplerStopsOnSignal(t *testing.T) {
	s, sum, out, _ := newTestSampler(t, "--cgroup", "a=g", "--cgroup", "b=g", "--interval", "1ms")
	asked := monoNs()
	s.stop.Store(int32(syscall.SIGTERM))
	s.begin(0)
	s.run()
	s.finish()
	if sum.StopReason != "terminated" || sum.Ticks != 1 || sum.Rows != 2 || s.exitCode() != 0 {
		t.Errorf("stop %q, ticks %d, rows %d, exit %d", sum.StopReason, sum.Ticks, sum.Rows, s.exitCode())
	}
	_, rows := readRows(t, out)
	if len(rows) != 2 {
		t.Fatalf("rows %q", rows)
	}
	for _, r := range rows {
		if tNs, _ := strconv.ParseInt(r[0], 10, 64); tNs < asked {
			t.Errorf("row %q: read %d ns before the stop was asked for", r, asked-tNs)
		}
	}
}

// TestSamplerStopGoneIsClean: the container may go at once once its collector has asked the
// sampler to stop; that last read finding the cgroup gone leaves a clean stop (exit 0).
func TestSamplerStopGoneIsClean(t *testing.T) {
	s, sum, _, _ := newTestSampler(t, "--cgroup", "g", "--interval", "1ms")
	s.begin(0)
	// a stand-in for the kernel's ENODEV on a removed cgroup's held file (a fixture file
	// stays readable once removed): the closed file fails its read the same way
	s.targets[0].close()
	s.stop.Store(int32(syscall.SIGTERM))
	s.run()
	s.finish()
	if sum.StopReason != "terminated" || sum.ReadErrors != 0 || s.exitCode() != 0 {
		t.Errorf("stop %q, read errors %d, exit %d", sum.StopReason, sum.ReadErrors, s.exitCode())
	}
}

// TestSamplerStopsOnSIGPIPE: the output is gone; no read is taken for it.
func TestSamplerStopsOnSIGPIPE(t *testing.T) {
	s, sum, _, _ := newTestSampler(t, "--cgroup", "g", "--interval", "1ms")
	s.stop.Store(int32(syscall.SIGPIPE))
	s.begin(0)
	s.run()
	s.finish()
	if sum.StopReason != "broken pipe" || sum.Ticks != 0 || s.exitCode() != 0 {
		t.Errorf("stop %q, ticks %d, exit %d", sum.StopReason, sum.Ticks, s.exitCode())
	}
}

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		bad    bool
		errors uint64
		want   int
	}{{false, 0, 0}, {false, 1, 3}, {true, 1, 4}} {
		s := &sampler{sum: &summary{ReadErrors: c.errors}, badData: c.bad}
		if got := s.exitCode(); got != c.want {
			t.Errorf("bad data %v, read errors %d: exit %d, want %d", c.bad, c.errors, got, c.want)
		}
	}
}

// TestRunAllocatesNothing: the loop, flushes included, allocates nothing (GC is off in the
// sampler, so every allocation would stay).
func TestRunAllocatesNothing(t *testing.T) {
	s, sum, _, _ := newTestSampler(t, "--cgroup", "g", "--interval", "1ms", "--flush", "0")
	checkRunAllocatesNothing(t, s, sum)
}

// checkRunAllocatesNothing runs the loop for 3 ms at a time and fails on any allocation
// (or on a run that wrote no row).
func checkRunAllocatesNothing(t *testing.T, s *sampler, sum *summary) {
	t.Helper()
	allocs := testing.AllocsPerRun(5, func() {
		s.begin(3 * time.Millisecond)
		s.run()
	})
	if allocs != 0 || sum.Rows == 0 {
		t.Errorf("%v allocations per 3 ms run (%d rows)", allocs, sum.Rows)
	}
}

// A collector exec'd through the API server ends the run by writing to stdin or closing it:
// the loop stops at the next tick, as for a signal, with exit 0 and its rows written.
func TestStdinEndsTheRun(t *testing.T) {
	for _, how := range []string{"line", "close"} {
		t.Run(how, func(t *testing.T) {
			s, sum, out, _ := newTestSampler(t, "--cgroup", "g", "--interval", "1ms")
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pr.Close()
			watchStdin(s.stop, pr)
			s.begin(time.Minute)
			done := make(chan struct{})
			go func() { s.run(); close(done) }()
			time.Sleep(50 * time.Millisecond)
			if how == "line" {
				_, err = pw.Write([]byte("stop\n"))
			} else {
				err = pw.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			asked := monoNs()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the run did not end 5 s after stdin said so")
			}
			s.finish()
			pw.Close()
			if sum.StopReason != "stdin" || s.exitCode() != 0 || sum.Rows == 0 {
				t.Errorf("stop %q, exit %d, rows %d", sum.StopReason, s.exitCode(), sum.Rows)
			}
			if sum.MonoEndNs > asked+int64(time.Second) {
				t.Errorf("last row %d ms after stdin ended the run", (sum.MonoEndNs-asked)/1e6)
			}
			if _, rows := readRows(t, out); uint64(len(rows)) != sum.Rows {
				t.Errorf("%d rows in the file, %d counted", len(rows), sum.Rows)
			}
		})
	}
}

// signalsTree is v2Tree with cgroup g's cpu.stat, cpu.pressure and cpu.stat.local from
// tests/data/cgroup/v2/signals (a 6.6+ kernel), and a cgroup h with a cpu.stat alone (a
// level without the files).
func signalsTree(t *testing.T) string {
	t.Helper()
	root := v2Tree(t)
	src := filepath.Join("..", "..", "..", "tests", "data", "cgroup", "v2", "signals")
	for _, f := range []string{"cpu.stat", "cpu.pressure", "cpu.stat.local"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "g", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "h"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "h", "cpu.stat"), []byte("usage_usec 1\nnr_periods 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// the signals fixture's v2 columns as a row writes them, after burst_us
const fixtureSignals = "2204117,2187350,2702113"

// TestSamplerSignalColumns: a target with cpu.pressure and cpu.stat.local gets the three
// columns after burst_us, and the summary every key of its first and last reads.
func TestSamplerSignalColumns(t *testing.T) {
	root := signalsTree(t)
	s, sum, out := samplerOn(t, root, "--cgroup", "g", "--interval", "1ms")
	s.begin(5 * time.Millisecond)
	s.run()
	// the kernel's later text: the summary's last read is the last row's
	g := filepath.Join(root, "g")
	for f, content := range map[string]string{
		"cpu.stat":       "usage_usec 3100000\nnice_usec 7\nnr_periods 62\nnr_throttled 53\nthrottled_usec 2700000\nfuture_usec 1\n",
		"cpu.pressure":   "some avg10=1.00 avg60=0.50 avg300=0.10 total=2300000\n",
		"cpu.stat.local": "throttled_usec 2800000\n",
	} {
		if err := os.WriteFile(filepath.Join(g, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.begin(3 * time.Millisecond)
	s.run()
	s.finish()
	hdr, rows := readRows(t, out)
	if hdr != csvHeader+",psi_some_us,psi_full_us,local_throttled_us" || len(rows) == 0 || uint64(len(rows)) != sum.Rows {
		t.Fatalf("header %q, %d rows, %d counted", hdr, len(rows), sum.Rows)
	}
	if got := strings.Join(rows[0][2:], ","); got != fixtureCounters+","+fixtureSignals {
		t.Errorf("first row %q", got)
	}
	// the later cpu.pressure has no full line: an empty field, never 0
	if got := strings.Join(rows[len(rows)-1][2:], ","); got != "3100000,62,53,2700000,0,0,2300000,,2800000" {
		t.Errorf("last row %q", got)
	}
	b, err := json.Marshal(sum.Cgroups[0])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"stat_first": map[string]any{"usage_usec": 3012345.0, "user_usec": 2900000.0, "system_usec": 112345.0,
			"nice_usec": 0.0, "core_sched.force_idle_usec": 0.0, "nr_periods": 61.0, "nr_throttled": 52.0,
			"throttled_usec": 2636400.0, "nr_bursts": 0.0, "burst_usec": 0.0},
		"stat_last": map[string]any{"usage_usec": 3100000.0, "nice_usec": 7.0, "nr_periods": 62.0,
			"nr_throttled": 53.0, "throttled_usec": 2700000.0, "future_usec": 1.0},
		"stat_local_first": map[string]any{"throttled_usec": 2702113.0},
		"stat_local_last":  map[string]any{"throttled_usec": 2800000.0},
		"pressure_first":   map[string]any{"some_total_us": 2204117.0, "full_total_us": 2187350.0},
		"pressure_last":    map[string]any{"some_total_us": 2300000.0, "full_total_us": nil},
		"cpu_pressure":     filepath.Join(g, "cpu.pressure"),
		"cpu_stat_local":   filepath.Join(g, "cpu.stat.local"),
	}
	for k, v := range want {
		if !reflect.DeepEqual(c[k], v) {
			t.Errorf("summary %s: %v, want %v", k, c[k], v)
		}
	}
}

// TestSamplerSignalsOfSeveralLevels: a level without the files writes empty fields in the
// v2 columns (never 0) and has no such keys in the summary.
func TestSamplerSignalsOfSeveralLevels(t *testing.T) {
	s, sum, out := samplerOn(t, signalsTree(t), "--cgroup", "pod=g", "--cgroup", "ctr=h", "--interval", "1ms", "--summary", "stderr")
	s.begin(5 * time.Millisecond)
	s.run()
	s.finish()
	hdr, rows := readRows(t, out)
	if hdr != csvHeader+signalsHeader+",cgroup" || len(rows) == 0 {
		t.Fatalf("header %q, %d rows", hdr, len(rows))
	}
	for i, r := range rows {
		want := []string{fixtureCounters + "," + fixtureSignals + ",pod", "1,2,0,0,0,0,,,,ctr"}[i%2]
		if got := strings.Join(r[2:], ","); got != want {
			t.Fatalf("row %d: %q, want %q", i, got, want)
		}
	}
	ctr := sum.Cgroups[1]
	for _, k := range []string{"pressure_first", "pressure_last", "stat_local_first", "stat_local_last", "cpu_pressure"} {
		if _, ok := ctr[k]; ok {
			t.Errorf("ctr has %s: %v", k, ctr[k])
		}
	}
	if st, ok := ctr["stat_last"].(map[string]uint64); !ok || st["usage_usec"] != 1 || len(st) != 2 {
		t.Errorf("ctr stat_last %v", ctr["stat_last"])
	}
}

// TestSamplerStopsOnBadPressure: a cpu.pressure the kernel would not write stops the run
// as a bad cpu.stat does (exit 4, the file and line as facts, no row for the read); the
// summary keeps the last good read.
func TestSamplerStopsOnBadPressure(t *testing.T) {
	root := signalsTree(t)
	s, sum, out := samplerOn(t, root, "--cgroup", "g", "--interval", "1ms")
	s.begin(3 * time.Millisecond)
	s.run()
	rowsBefore := sum.Rows
	p := filepath.Join(root, "g", "cpu.pressure")
	if err := os.WriteFile(p, []byte("some avg10=0.00 total=5\nfull avg10=0.00 total=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.begin(time.Second)
	s.run()
	s.finish()
	if !strings.Contains(sum.StopReason, "cpu.pressure") || s.exitCode() != 4 || sum.Rows != rowsBefore {
		t.Errorf("stop %q, exit %d, rows %d (before %d)", sum.StopReason, s.exitCode(), sum.Rows, rowsBefore)
	}
	if e := sum.Error; e == nil || e.Kind != "format" || e.Line != 2 || e.Path != p {
		t.Errorf("error facts %+v", e)
	}
	if _, rows := readRows(t, out); uint64(len(rows)) != rowsBefore {
		t.Errorf("%d rows written, %d before the bad read", len(rows), rowsBefore)
	}
	if pl, ok := sum.Cgroups[0]["pressure_last"].(map[string]any); !ok || pl["some_total_us"] != uint64(2204117) {
		t.Errorf("pressure_last %v", sum.Cgroups[0]["pressure_last"])
	}
}

// TestRunWithSignalsAllocatesNothing: reading, keeping and writing the v2 signals of
// several levels allocates nothing in the loop.
func TestRunWithSignalsAllocatesNothing(t *testing.T) {
	s, sum, _ := samplerOn(t, signalsTree(t), "--cgroup", "pod=g", "--cgroup", "ctr=h", "--interval", "1ms", "--flush", "0")
	checkRunAllocatesNothing(t, s, sum)
}

// TestAppendKeepsTheFileShape: a second run on a cgroup with the v2 files, appended to a
// file begun by a run without them, writes rows of the file's shape.
func TestAppendKeepsTheFileShape(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cpu_stat.csv")
	first := csvHeader + "\n1,1,1,1,1,1,1,1\n"
	if err := os.WriteFile(out, []byte(first), 0o644); err != nil {
		t.Fatal(err)
	}
	s, sum, _ := samplerOn(t, signalsTree(t), "--cgroup", "g", "--interval", "1ms", "--out", out)
	s.begin(3 * time.Millisecond)
	s.run()
	s.finish()
	hdr, rows := readRows(t, out)
	if hdr != csvHeader || uint64(len(rows)) != sum.Rows+1 {
		t.Fatalf("header %q, %d rows for %d", hdr, len(rows), sum.Rows)
	}
	for i, r := range rows[1:] {
		if got := strings.Join(r[2:], ","); got != fixtureCounters {
			t.Fatalf("row %d: %q", i, got)
		}
	}
}
