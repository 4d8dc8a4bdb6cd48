package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.txt from the scrape")

const (
	podUID = "0b6c4a3e-1f2d-4c5b-8a7e-9d0c1b2a3f4e"
	appID  = "fedcba9876543210"
	sideID = "0123456789abcdef"
)

// podListing is the API server's answer: one Burstable pod, an app with GOMAXPROCS=2 and a
// 500m limit, and a sidecar with 100m and GOMAXPROCS from a ConfigMap (not a number).
func podListing(pods int) string {
	if pods == 0 {
		return `{"items":[]}`
	}
	return `{"items":[{"metadata":{"name":"web-7d4b9c-x2k","namespace":"shop","uid":"` + podUID + `"},
	 "spec":{"nodeName":"n1","containers":[
	   {"name":"app","resources":{"limits":{"cpu":"500m"}},"env":[{"name":"GOMAXPROCS","value":"2"}]},
	   {"name":"proxy","resources":{"limits":{"cpu":"100m"}},
	    "env":[{"name":"GOMAXPROCS","valueFrom":{"configMapKeyRef":{"name":"c","key":"k"}}}]}]},
	 "status":{"phase":"Running","qosClass":"Burstable","containerStatuses":[
	   {"name":"app","containerID":"containerd://` + appID + `","state":{"running":{}}},
	   {"name":"proxy","containerID":"containerd://` + sideID + `","state":{"running":{}}}]}}]}`
}

// cgTree is a fake cgroup mount mirroring the kubelet's cgroupfs layout (v1: separate cpu
// and cpuacct hierarchies, as on the local cluster; v2: one tree).
type cgTree struct {
	t       *testing.T
	root    string
	version int
}

func newTree(t *testing.T, version int) *cgTree {
	tr := &cgTree{t: t, root: t.TempDir(), version: version}
	if version == 2 {
		tr.write("cgroup.controllers", "cpuset cpu io memory pids\n")
	}
	return tr
}

func (tr *cgTree) write(rel, content string) {
	tr.t.Helper()
	p := filepath.Join(tr.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	// rewritten in place (same inode): the agent's held descriptors read the new counters
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

// counters is what a level's files hold.
type counters struct {
	periods, throttled uint64
	throttledUs        uint64
	usageUs            uint64
	quotaUs            int64 // -1: none
}

// set writes a cgroup's cpu.stat (and usage, limits) in the version's own units.
func (tr *cgTree) set(rel string, c counters) {
	if tr.version == 2 {
		tr.write(filepath.Join(rel, "cpu.stat"), fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec 0\n"+
			"nr_periods %d\nnr_throttled %d\nthrottled_usec %d\nnr_bursts 0\nburst_usec 0\n",
			c.usageUs, c.usageUs, c.periods, c.throttled, c.throttledUs))
		q := "max"
		if c.quotaUs >= 0 {
			q = fmt.Sprint(c.quotaUs)
		}
		tr.write(filepath.Join(rel, "cpu.max"), q+" 100000\n")
		return
	}
	tr.write(filepath.Join("cpu", rel, "cpu.stat"), fmt.Sprintf("nr_periods %d\nnr_throttled %d\nthrottled_time %d\n",
		c.periods, c.throttled, c.throttledUs*1000))
	tr.write(filepath.Join("cpu", rel, "cpu.cfs_period_us"), "100000\n")
	tr.write(filepath.Join("cpu", rel, "cpu.cfs_quota_us"), fmt.Sprintf("%d\n", c.quotaUs))
	tr.write(filepath.Join("cpuacct", rel, "cpuacct.usage"), fmt.Sprintf("%d\n", c.usageUs*1000))
}

const podRel = "kubepods/burstable/pod" + podUID

// metricsAgent is an agent with metrics on, watching the fake tree through a fake API
// server whose listing holds `pods` pods.
func metricsAgent(t *testing.T, tr *cgTree, cfg *config, pods *int) *agent {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/pods" || r.URL.Query().Get("fieldSelector") != "spec.nodeName=n1" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, podListing(*pods))
	}))
	t.Cleanup(srv.Close)
	cfg.root, cfg.node, cfg.api, cfg.metricsAddr = tr.root, "n1", srv.URL, ":0"
	cfg.watchEvery, cfg.listEvery = time.Second, time.Second
	if cfg.trig.periods == 0 {
		cfg.trig = trigger{periods: 50, share: 0.2}
	}
	if cfg.out == "" {
		cfg.out = t.TempDir()
	}
	a, err := newAgent(cfg, newEvents(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, w := range a.targets {
			w.close()
		}
	})
	return a
}

// expected is the exposition of the per-container series for the app, the proxy and the pod.
func expected(app, proxy, pod counters) string {
	var b strings.Builder
	type row struct {
		container, level string
		c                counters
	}
	rows := []row{{"app", "container", app}, {"proxy", "container", proxy}, {"", "pod", pod}}
	metric := func(name, typ string, val func(c counters) string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help[name], name, typ)
		for _, r := range rows {
			if v := val(r.c); v != "" {
				fmt.Fprintf(&b, "%s{container=%q,level=%q,namespace=\"shop\",pod=\"web-7d4b9c-x2k\"} %s\n",
					name, r.container, r.level, v)
			}
		}
	}
	metric(mPeriods, "counter", func(c counters) string { return fmt.Sprint(c.periods) })
	metric(mThrottled, "counter", func(c counters) string { return fmt.Sprint(c.throttled) })
	metric(mThrottledSec, "counter", func(c counters) string { return fmt.Sprint(float64(c.throttledUs) / 1e6) })
	metric(mUsageSec, "counter", func(c counters) string { return fmt.Sprint(float64(c.usageUs) / 1e6) })
	metric(mQuota, "gauge", func(c counters) string {
		if c.quotaUs < 0 {
			return ""
		}
		return fmt.Sprint(float64(c.quotaUs) / 1e6)
	})
	metric(mPeriod, "gauge", func(c counters) string { return "0.1" })
	// the app's env sets 2; the proxy's comes from a ConfigMap: no series
	fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s{container=\"app\",namespace=\"shop\",pod=\"web-7d4b9c-x2k\"} 2\n",
		mGomaxprocs, help[mGomaxprocs], mGomaxprocs, mGomaxprocs)
	return b.String()
}

var perContainer = []string{mPeriods, mThrottled, mThrottledSec, mUsageSec, mQuota, mPeriod, mGomaxprocs}

// The counters the agent exports are the cpu.stat counters of the cgroups it reads, in
// seconds, per level, on both cgroup versions; a container gone from the node leaves the
// scrape.
func TestMetricsFollowTheCgroupCounters(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			tr := newTree(t, version)
			app := counters{periods: 120, throttled: 37, throttledUs: 2_345_678, usageUs: 5_000_001, quotaUs: 50_000}
			proxy := counters{periods: 40, throttled: 0, throttledUs: 0, usageUs: 300, quotaUs: 10_000}
			pod := counters{periods: 130, throttled: 12, throttledUs: 900_000, usageUs: 5_000_301, quotaUs: 60_000}
			tr.set(podRel+"/"+appID, app)
			tr.set(podRel+"/"+sideID, proxy)
			tr.set(podRel, pod)
			pods := 1
			a := metricsAgent(t, tr, &config{}, &pods)
			ctx := context.Background()
			a.refresh(ctx)
			a.tick(ctx)
			a.publishMetrics()
			if err := testutil.CollectAndCompare(a.metrics, strings.NewReader(expected(app, proxy, pod)), perContainer...); err != nil {
				t.Fatal(err)
			}
			// the counters move, the pod is resized in place (the quota follows)
			app = counters{periods: 150, throttled: 60, throttledUs: 4_000_000, usageUs: 6_500_000, quotaUs: 100_000}
			pod = counters{periods: 161, throttled: 20, throttledUs: 1_200_000, usageUs: 6_500_400, quotaUs: 110_000}
			tr.set(podRel+"/"+appID, app)
			tr.set(podRel, pod)
			a.tick(ctx)
			a.publishMetrics()
			if err := testutil.CollectAndCompare(a.metrics, strings.NewReader(expected(app, proxy, pod)), perContainer...); err != nil {
				t.Fatal(err)
			}
			watched := "# HELP gmp_watched_containers Containers with a CPU limit the agent watches on its node.\n" +
				"# TYPE gmp_watched_containers gauge\ngmp_watched_containers 2\n"
			if err := testutil.CollectAndCompare(a.metrics, strings.NewReader(watched), "gmp_watched_containers"); err != nil {
				t.Fatal(err)
			}
			// the pod is deleted: its series go with it
			pods = 0
			a.refresh(ctx)
			a.publishMetrics()
			if n := testutil.CollectAndCount(a.metrics, perContainer...); n != 0 {
				t.Fatalf("%d series left of a pod no longer on the node", n)
			}
		})
	}
}

// A trigger whose capture the limits refuse counts once per episode and reason.
func TestMetricsCountRefusalsOncePerEpisode(t *testing.T) {
	tr := newTree(t, 2)
	c := counters{periods: 100, throttled: 0, usageUs: 1, quotaUs: 50_000}
	tr.set(podRel+"/"+appID, c)
	tr.set(podRel+"/"+sideID, c)
	tr.set(podRel, c)
	pods := 1
	a := metricsAgent(t, tr, &config{trig: trigger{periods: 2, share: 0.2}, perHour: 0, maxConcurrent: 1}, &pods)
	ctx := context.Background()
	a.refresh(ctx)
	a.tick(ctx)
	for i := 1; i <= 3; i++ {
		c.periods, c.throttled = c.periods+10, c.throttled+8
		tr.set(podRel+"/"+appID, c)
		a.tick(ctx)
	}
	if n := testutil.ToFloat64(a.metrics.refusals.WithLabelValues("watch_only")); n != 1 {
		t.Fatalf("watch_only refusals %v over one episode, want 1", n)
	}
	if n := testutil.ToFloat64(a.metrics.triggers); n != 1 {
		t.Fatalf("triggers %v, want 1", n)
	}
	if n := testutil.ToFloat64(a.metrics.refusals.WithLabelValues("busy")); n != 0 {
		t.Fatalf("busy refusals %v", n)
	}
}

// The names a scrape of /metrics serves are the ones in testdata/metrics.txt, with their
// types (the dashboard's queries and the README's list are checked against that file by
// tests/test_chart.py); `go test -run TestMetricNames -update` rewrites it.
func TestMetricNames(t *testing.T) {
	tr := newTree(t, 1)
	c := counters{periods: 10, throttled: 1, throttledUs: 5, usageUs: 7, quotaUs: 50_000}
	tr.set(podRel+"/"+appID, c)
	tr.set(podRel+"/"+sideID, c)
	tr.set(podRel, c)
	pods := 1
	a := metricsAgent(t, tr, &config{}, &pods)
	addr, stop, err := a.serveMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	a.refresh(ctx)
	a.tick(ctx)
	a.publishMetrics()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	types := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	// the agent's own CPU and memory
	for _, n := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if _, ok := types[strings.TrimSuffix(n, "_total")]; !ok {
			if _, ok := types[n]; !ok {
				t.Errorf("no %s in the scrape", n)
			}
		}
	}
	var lines []string
	for n, typ := range types {
		if strings.HasPrefix(n, "gmp_") {
			lines = append(lines, n+" "+typ)
		}
	}
	sort.Strings(lines)
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join("testdata", "metrics.txt")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run TestMetricNames -update writes it)", err)
	}
	if string(want) != got {
		t.Fatalf("the scrape's gmp_* metrics differ from %s (go test -run TestMetricNames -update):\n got:\n%s\nwant:\n%s",
			golden, got, want)
	}
}

func TestMetricsAddrInUse(t *testing.T) {
	tr := newTree(t, 2)
	pods := 0
	a := metricsAgent(t, tr, &config{}, &pods)
	addr, stop, err := a.serveMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, _, err := a.serveMetrics(addr.String()); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Fatalf("a second listener on %s: %v", addr, err)
	}
}
