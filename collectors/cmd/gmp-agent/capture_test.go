package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeSampler stands in for gmp-sampler (a real one needs a cgroup tree; tests/test_agent.py
// runs the real one): it writes rows to --out until SIGTERM, its start line and summary as
// JSON on stderr, as gmp-sampler --summary stderr does.
const fakeSampler = `#!/bin/sh
out=""; prev=""
for a in "$@"; do [ "$prev" = "--out" ] && out="$a"; prev="$a"; done
echo "t_ns,read_ns,usage_us,nr_periods,nr_throttled,throttled_us,nr_bursts,burst_us,cgroup" > "$out"
echo '{"start":{"cgroups":[{"name":"container","path":"x","version":1,"limits":{"period_us":100000,"quota_us":50000,"burst_us":0}}],"interval_ns":997000,"kernel":"k","ncpu":2}}' >&2
trap 'echo "{\"summary\":{\"stop_reason\":\"signal\"}}" >&2; exit 0' TERM
i=1; while :; do echo "$i,1,0,0,0,0,0,0,container" >> "$out"; i=$((i+1)); sleep 0.05; done
`

func captureWith(t *testing.T, handler http.HandlerFunc) (*capture, captureResult, time.Duration) {
	dir := t.TempDir()
	script := filepath.Join(dir, "sampler.sh")
	if err := os.WriteFile(script, []byte(fakeSampler), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	p := portOf(t, srv)
	cfg := &config{out: filepath.Join(dir, "out"), sampler: script, capture: time.Second, traceTimeout: 10 * time.Second,
		interval: 997 * time.Microsecond, maxTrace: 1 << 20}
	w := &watched{spec: spec{Namespace: "n", Pod: "p", Container: "c", PodIP: "127.0.0.1", PprofPort: p},
		levels: []*level{{name: "container", spec: "x"}}}
	c := newCapture(cfg, w, "n/p/c")
	t0 := time.Now()
	res := c.run(context.Background())
	return c, res, time.Since(t0)
}

func finalMeta(t *testing.T, c *capture) map[string]any {
	b, err := os.ReadFile(filepath.Join(c.final, "meta.json"))
	if err != nil {
		t.Fatalf("no finished bundle: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// A trace served late: the sampling goes on until it has ended, then stops (not at the
// window's end, not at the slack's).
func TestCaptureSamplesUntilTheTraceEnds(t *testing.T) {
	c, res, took := captureWith(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond)
		io.WriteString(w, "go 1.23 trace\x00\x00\x00body")
	})
	if !res.complete || res.err != "" || res.dir != c.final {
		t.Fatalf("result %+v", res)
	}
	if took < 1500*time.Millisecond || took > 5*time.Second {
		t.Fatalf("the capture took %v: want the trace's 1.5 s and a little, not the 11 s window", took)
	}
	m := finalMeta(t, c)
	if m["complete"] != true || m["quota_us"] != float64(50000) || m["mono_end_ns"] == nil {
		t.Fatalf("meta %v", m)
	}
	if _, err := os.Stat(filepath.Join(c.cfg.out, partialDir, filepath.Base(c.final))); err == nil {
		t.Fatal("the bundle is still under .partial")
	}
}

// A trace refused at once: the sampling still lasts the capture's length, and the bundle
// says the trace is missing.
func TestCaptureWithoutItsTraceStillSamplesTheWindow(t *testing.T) {
	c, res, took := captureWith(t, http.NotFound)
	if res.complete || !strings.Contains(res.err, "404") {
		t.Fatalf("result %+v", res)
	}
	if took < time.Second || took > 5*time.Second {
		t.Fatalf("the capture took %v, want about the 1 s window", took)
	}
	m := finalMeta(t, c)
	if m["complete"] != false || !strings.Contains(m["error"].(string), "trace") || m["mono_end_ns"] == nil {
		t.Fatalf("meta %v", m)
	}
}
