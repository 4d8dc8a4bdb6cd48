package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

func testSummary() *summary {
	return &summary{
		Cgroups: []map[string]any{{"name": "g"}}, IntervalNs: 997_000, Policy: "SCHED_FIFO:10",
		MonoStartNs: 1_000_000_000, MonoEndNs: 3_500_000_000, Ticks: 2500, Rows: 2500, Missed: 3,
		LateP50Ns: 12_000, LateP99Ns: 150_000, LateMaxNs: 900_123, CPUPctOfCore: 4.5678,
		StopReason: "terminated", SamplerVersion: "go1.26",
	}
}

const testProse = "gmp-sampler: 2500 rows in 2.50s at 997µs, SCHED_FIFO:10; wake-up lateness p50 12µs " +
	"p99 150µs max 900µs; missed ticks 3; own CPU 4.57% of one core; stop: terminated\n"

func TestWriteReport(t *testing.T) {
	var b bytes.Buffer
	if err := writeReport(&b, testSummary(), 997*time.Microsecond, ""); err != nil || b.String() != testProse {
		t.Fatalf("%v, %q", err, b.String())
	}

	b.Reset()
	if err := writeReport(&b, testSummary(), 997*time.Microsecond, "stderr"); err != nil {
		t.Fatal(err)
	}
	line, ok := strings.CutPrefix(b.String(), testProse)
	var m map[string]map[string]any
	if !ok || strings.Count(line, "\n") != 1 || json.Unmarshal([]byte(line), &m) != nil {
		t.Fatalf("not the prose then one JSON line: %q", b.String())
	}
	if s := m["summary"]; s["rows"] != 2500.0 || s["stop_reason"] != "terminated" || s["missed_ticks"] != 3.0 {
		t.Errorf("summary line %v", s)
	}
	if _, ok := m["summary"]["policy_error"]; ok {
		t.Error("empty policy_error written")
	}

	b.Reset()
	file := filepath.Join(t.TempDir(), "s.json")
	if err := writeReport(&b, testSummary(), 997*time.Microsecond, file); err != nil || b.String() != testProse {
		t.Fatalf("%v, %q", err, b.String())
	}
	want, _ := json.MarshalIndent(testSummary(), "", "  ")
	if got, _ := os.ReadFile(file); string(got) != string(want)+"\n" {
		t.Errorf("file %s", got)
	}
	if err := writeReport(&b, testSummary(), time.Millisecond, filepath.Join(file, "x")); err == nil {
		t.Error("no error for a summary that cannot be written")
	}
}

func TestWriteStart(t *testing.T) {
	var b bytes.Buffer
	writeStart(&b, testSummary())
	var m map[string]map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || !strings.HasSuffix(b.String(), "}\n") {
		t.Fatalf("%v: %q", err, b.String())
	}
	s := m["start"]
	// policy_error and user_hz are there even when empty
	keys := []string{"cgroups", "interval_ns", "policy", "policy_error", "mono_start_ns", "user_hz", "sampler_go_version", "kernel", "ncpu"}
	for _, k := range keys {
		if _, ok := s[k]; !ok {
			t.Errorf("no %s in %v", k, s)
		}
	}
	if len(s) != len(keys) || s["mono_start_ns"] != 1e9 || s["policy"] != "SCHED_FIFO:10" {
		t.Errorf("start line %v", s)
	}
}

func TestHostStatSampleIfDue(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "host.csv")
	hs, err := startHostStat(dest, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.close()
	hs.every, hs.next = 50, 100
	rows := func() int {
		b, _ := os.ReadFile(dest)
		return strings.Count(string(b), "\n") - 1 // less the header
	}
	hs.sampleIfDue(99)
	if rows() != 0 || hs.next != 100 {
		t.Fatalf("early: %d rows, next %d", rows(), hs.next)
	}
	hs.sampleIfDue(260) // 100, 150, 200 and 250 are past: one read, the next on the grid
	if rows() != 1 || hs.next != 300 {
		t.Fatalf("late: %d rows, next %d", rows(), hs.next)
	}
	hs.sampleIfDue(300)
	if rows() != 2 || hs.next != 350 || hs.errs != 0 {
		t.Fatalf("on time: %d rows, next %d, errors %d", rows(), hs.next, hs.errs)
	}
}

func TestNodeFacts(t *testing.T) {
	// a collector that cannot see the node records these from the sampler that runs there
	if kernelRelease() == "" {
		t.Error("no kernel release from uname")
	}
	c := &config{interval: 997 * time.Microsecond}
	if s := newSummary(c, nil, nil); s.Kernel != kernelRelease() || s.NCPU < 1 {
		t.Errorf("summary kernel %q ncpu %d", s.Kernel, s.NCPU)
	}
}

// TestWriteFailure: a run that could not start leaves its error as JSON facts where
// --summary points, so the collector raises a typed error rather than parsing prose.
func TestWriteFailure(t *testing.T) {
	err := &cgroup.FormatError{Path: "/c/cpu.max", Line: 1, Text: "max 1000001", Reason: "period must be 1000..1000000 µs"}
	wrapped := fmt.Errorf("cgroup %q: %w", "g", err)
	var b bytes.Buffer
	if werr := writeFailure(&b, "", wrapped); werr != nil || b.Len() != 0 {
		t.Fatalf("%v %q", werr, b.String())
	}
	if werr := writeFailure(&b, "stderr", wrapped); werr != nil {
		t.Fatal(werr)
	}
	var m map[string]map[string]any
	if json.Unmarshal(b.Bytes(), &m) != nil || !strings.HasSuffix(b.String(), "}\n") || strings.Count(b.String(), "\n") != 1 {
		t.Fatalf("not one JSON line: %q", b.String())
	}
	e := m["error"]
	if e["kind"] != "format" || e["path"] != "/c/cpu.max" || e["line"] != 1.0 || e["message"] != wrapped.Error() {
		t.Errorf("error line %v", e)
	}
	file := filepath.Join(t.TempDir(), "s.json")
	if werr := writeFailure(&b, file, errors.New("--interval must be positive")); werr != nil {
		t.Fatal(werr)
	}
	var f map[string]any
	raw, _ := os.ReadFile(file)
	if json.Unmarshal(raw, &f) != nil || f["stop_reason"] != "not started" || f["error"].(map[string]any)["kind"] != "other" {
		t.Errorf("file %s", raw)
	}
}
