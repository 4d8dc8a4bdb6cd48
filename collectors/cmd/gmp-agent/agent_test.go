package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func testAgent(t *testing.T, cfg *config) *agent {
	if cfg.out == "" {
		cfg.out = t.TempDir()
	}
	return &agent{cfg: cfg, ev: newEvents(io.Discard), targets: map[string]*watched{}, done: make(chan captureResult, 4),
		lastByWl: map[string]time.Duration{}, told: map[string]bool{}}
}

func TestAllowedLimits(t *testing.T) {
	a := testAgent(t, &config{perHour: 2, maxConcurrent: 1, cooldown: 10 * time.Minute})
	web := &watched{spec: spec{Namespace: "shop", Pod: "web-abc-x", Container: "app"}}
	db := &watched{spec: spec{Namespace: "shop", Pod: "db-0", Container: "pg"}}
	now := 5 * time.Hour
	if k, _ := a.allowed(web, now); k != "" {
		t.Fatalf("first capture refused: %s", k)
	}
	a.running, a.recent, a.lastByWl[web.workload()] = 1, []time.Duration{now}, now
	if k, _ := a.allowed(db, now); k != "busy" {
		t.Fatalf("kind %q while a capture runs, want busy", k)
	}
	a.running = 0
	if k, _ := a.allowed(web, now+time.Minute); k != "workload cooldown" {
		t.Fatalf("kind %q within the cooldown, want workload cooldown", k)
	}
	if k, _ := a.allowed(web, now+11*time.Minute); k != "" {
		t.Fatalf("kind %q after the cooldown", k)
	}
	a.recent = append(a.recent, now+time.Minute)
	if k, _ := a.allowed(db, now+2*time.Minute); k != "node budget" {
		t.Fatalf("kind %q with 2 captures in the hour, want node budget", k)
	}
	// the hour slides: the first capture leaves the window
	if k, _ := a.allowed(db, now+61*time.Minute); k != "" {
		t.Fatalf("kind %q after the hour, want none", k)
	}
	a.cfg.perHour = 0
	if k, _ := a.allowed(db, now); k != "watch only" {
		t.Fatalf("kind %q with --max-per-hour 0", k)
	}
	a.cfg.perHour, a.recent = 5, nil
	a.cfg.maxSpool = 10
	os.WriteFile(filepath.Join(a.cfg.out, "x"), make([]byte, 11), 0o644)
	if k, why := a.allowed(db, now); k != "spool full" || !strings.Contains(why, "store put --move") {
		t.Fatalf("kind %q (%s) with a full spool", k, why)
	}
}

func TestSafeNames(t *testing.T) {
	// the same golden cases as the Python side (gmpanalysis/names.py)
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "tests", "data", "names.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct{ In, Out string }
	if err := json.Unmarshal(data, &cases); err != nil || len(cases) < 10 {
		t.Fatalf("tests/data/names.json: %v (%d cases)", err, len(cases))
	}
	for _, c := range cases {
		if got := safe(c.In); got != c.Out {
			t.Errorf("safe(%q) = %q, want %q", c.In, got, c.Out)
		}
	}
}

func TestGomaxprocsEnv(t *testing.T) {
	ref := func(res, div string) *envSource {
		e := &envSource{}
		e.ResourceFieldRef = &struct {
			Resource string `json:"resource"`
			Divisor  string `json:"divisor"`
		}{res, div}
		return e
	}
	lit := "3"
	cases := []struct {
		value *string
		from  *envSource
		limit string
		want  string
		ok    bool
	}{
		{&lit, nil, "500m", "3", true},
		{nil, ref("limits.cpu", ""), "500m", "1", true}, // the downward API rounds up
		{nil, ref("limits.cpu", "1"), "2500m", "3", true},
		{nil, ref("limits.cpu", "0"), "2500m", "3", true}, // the API server's "unset"
		{nil, ref("limits.cpu", ""), "2", "2", true},
		{nil, ref("limits.cpu", "1m"), "2", "resourceFieldRef:limits.cpu", true},
		{nil, ref("requests.cpu", ""), "2", "resourceFieldRef:requests.cpu", true},
		{nil, nil, "2", "", false},
		{nil, &envSource{}, "2", "valueFrom", true}, // a ConfigMap's value: set, not shown
	}
	for _, c := range cases {
		got, ok := gomaxprocsEnv(c.value, c.from, c.limit)
		if got != c.want || ok != c.ok {
			t.Errorf("gomaxprocsEnv(%v, %v) = %q %v, want %q %v", c.value, c.limit, got, ok, c.want, c.ok)
		}
	}
}

// A pod with an app and a sidecar: the trace port belongs to the container declaring it,
// and only that one fires on the pod level's throttling.
func TestTracedContainerOfAPod(t *testing.T) {
	body := `{"items":[{"metadata":{"name":"p","namespace":"n","uid":"0b6c4a3e-1f2d-4c5b-8a7e-9d0c1b2a3f4e",
	 "annotations":{"gmpanalysis/pprof-port":"6060"}},
	 "spec":{"containers":[{"name":"proxy","resources":{"limits":{"cpu":"100m"}}},
	   {"name":"app","resources":{"limits":{"cpu":"1"}},"ports":[{"containerPort":6060}]}]},
	 "status":{"phase":"Running","qosClass":"Burstable","containerStatuses":[
	   {"name":"proxy","containerID":"containerd://0123456789abcdef","state":{"running":{}}},
	   {"name":"app","containerID":"containerd://fedcba9876543210","state":{"running":{}}}]}}]}`
	specs, err := specsFrom([]byte(body))
	if err != nil || len(specs) != 2 {
		t.Fatalf("%v %+v", err, specs)
	}
	for _, s := range specs {
		traced := s.Container == "app"
		if (s.PprofPort == 6060) != traced || s.Primary != traced {
			t.Errorf("%s: port %d primary %v", s.Container, s.PprofPort, s.Primary)
		}
	}
	// the app declaring the port has no limit (not watched): its trace goes to no one, and
	// the limited sidecar is the pod's primary
	unlimited := strings.Replace(body, `"resources":{"limits":{"cpu":"1"}},"ports"`, `"resources":{},"ports"`, 1)
	specs, err = specsFrom([]byte(unlimited))
	if err != nil || len(specs) != 1 || specs[0].Container != "proxy" || specs[0].PprofPort != 0 || !specs[0].Primary {
		t.Fatalf("%v %+v", err, specs)
	}
}

// portOf is the port a test server listens on.
func portOf(t *testing.T, srv *httptest.Server) int {
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		t.Fatalf("test server at %s: %v %v", srv.URL, err, perr)
	}
	return p
}

func traceCapture(t *testing.T, srv *httptest.Server, maxTrace int64) (*capture, error) {
	p := portOf(t, srv)
	dir := t.TempDir()
	c := &capture{cfg: &config{capture: time.Second, traceTimeout: 5 * time.Second, maxTrace: maxTrace},
		spec: spec{PodIP: "127.0.0.1", PprofPort: p}, dir: dir, meta: map[string]any{}}
	return c, c.trace(context.Background())
}

func TestTraceFetch(t *testing.T) {
	good := "go 1.23 trace\x00\x00\x00" + strings.Repeat("x", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/debug/pprof/trace") && r.URL.Query().Get("seconds") == "1":
			io.WriteString(w, good)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := traceCapture(t, srv, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(c.dir, "trace.out")); string(b) != good || c.meta["trace"].(map[string]any)["complete"] != true {
		t.Fatalf("trace.out %d bytes, meta %v", len(b), c.meta["trace"])
	}
	// past --max-trace-bytes: cut and flagged
	c, err = traceCapture(t, srv, 100)
	if err == nil || !strings.Contains(err.Error(), "max-trace-bytes") {
		t.Fatalf("err %v", err)
	}
	if st, err := os.Stat(filepath.Join(c.dir, "trace.out")); err != nil || st.Size() != 100 {
		t.Fatalf("kept %v bytes (%v)", st, err)
	}
}

func TestTraceRefusesRedirectsAndNonTraces(t *testing.T) {
	hits := 0
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		io.WriteString(w, "go 1.23 trace secret")
	}))
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/latest/meta-data/", http.StatusFound)
	}))
	defer redirect.Close()
	c, err := traceCapture(t, redirect, 1<<20)
	if err == nil || hits != 0 {
		t.Fatalf("redirect followed: err %v, hits %d", err, hits)
	}
	if _, serr := os.Stat(filepath.Join(c.dir, "trace.out")); serr == nil {
		t.Fatal("a trace.out was written for a redirect")
	}
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html>metrics</html>")
	}))
	defer html.Close()
	c, err = traceCapture(t, html, 1<<20)
	if err == nil || !strings.Contains(err.Error(), "not a Go execution trace") {
		t.Fatalf("err %v", err)
	}
	if _, serr := os.Stat(filepath.Join(c.dir, "trace.out")); serr == nil {
		t.Fatal("a trace.out was written for a body that is not a trace")
	}
}

// An agent killed mid-capture leaves OUT/.partial/NAME: the next agent flags it, moves it
// into OUT, and its workload's cooldown still holds.
func TestRecoverSpool(t *testing.T) {
	a := testAgent(t, &config{perHour: 6, maxConcurrent: 1, cooldown: 30 * time.Minute})
	name := "n-web-x-app-20261124T000000Z-abcdef"
	dir := filepath.Join(a.cfg.out, partialDir, name)
	os.MkdirAll(dir, 0o755)
	meta := map[string]any{"schema": 2, "complete": false}
	// the log of captures begun (the bundles may have gone to the store since): one 5 min
	// ago, one 2 h ago (outside the hour and the cooldown: dropped from the log)
	a.logCapture("n/web/app", time.Now().Add(-5*time.Minute))
	a.logCapture("n/old/app", time.Now().Add(-2*time.Hour))
	b, _ := json.Marshal(meta)
	os.WriteFile(filepath.Join(dir, "meta.json"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "cpu_stat.csv"), []byte("t_ns,read_ns\n100,1\n200,1\n30"), 0o644)
	a.recoverSpool()
	b, err := os.ReadFile(filepath.Join(a.cfg.out, name, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(b, &got)
	if got["complete"] != false || !strings.Contains(got["error"].(string), "stopped mid-capture") ||
		got["mono_start_ns"] != float64(100) || got["mono_end_ns"] != float64(200) {
		t.Fatalf("recovered meta %v", got)
	}
	w := &watched{spec: spec{Namespace: "n", Pod: "web", Container: "app"}}
	if k, _ := a.allowed(w, monoNow()); k != "workload cooldown" || len(a.recent) != 1 {
		t.Fatalf("kind %q, recent %v: the restarted agent forgot its last capture", k, a.recent)
	}
	if b, _ := os.ReadFile(filepath.Join(a.cfg.out, captureLog)); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("capture log not pruned: %q", b)
	}
}

func TestUnknownFiguresAreNull(t *testing.T) {
	b, err := json.Marshal(verdict{Share: -1, FrozenPerMin: -1})
	if err != nil || !strings.Contains(string(b), `"throttled_share":null`) ||
		!strings.Contains(string(b), `"frozen_cpu_s_per_min":null`) {
		t.Fatalf("%s %v", b, err)
	}
	b, _ = json.Marshal(verdict{Share: 0.5, FrozenPerMin: 0})
	if !strings.Contains(string(b), `"throttled_share":0.5`) || !strings.Contains(string(b), `"frozen_cpu_s_per_min":0`) {
		t.Fatalf("%s", b)
	}
}

func TestHelpNamesTheSpoolValue(t *testing.T) {
	// Go's flag package takes a backquoted word of a usage text as the value's name
	var c config
	fs := flag.NewFlagSet("gmp-agent", flag.ContinueOnError)
	c.register(fs)
	f := fs.Lookup("max-spool-bytes")
	if name, _ := flag.UnquoteUsage(f); name != "value" && name != "int" {
		t.Fatalf("--max-spool-bytes shows its value as %q", name)
	}
}

// A native sidecar (an init container with restartPolicy Always, Kubernetes 1.29+) runs for
// the pod's life with a limit of its own: watched beside the app, never its primary; a
// plain init container, finished before the app starts, is not.
func TestNativeSidecarIsWatched(t *testing.T) {
	body := `{"items":[{"metadata":{"name":"p","namespace":"n","uid":"0b6c4a3e-1f2d-4c5b-8a7e-9d0c1b2a3f4e"},
	 "spec":{"initContainers":[{"name":"migrate","resources":{"limits":{"cpu":"1"}}},
	   {"name":"mesh","restartPolicy":"Always","resources":{"limits":{"cpu":"200m"}}}],
	   "containers":[{"name":"app","resources":{"limits":{"cpu":"1"}}}]},
	 "status":{"phase":"Running","qosClass":"Burstable",
	   "initContainerStatuses":[{"name":"migrate","containerID":"containerd://aaaaaaaaaaaaaaaa","state":{}},
	     {"name":"mesh","containerID":"containerd://0123456789abcdef","state":{"running":{}}}],
	   "containerStatuses":[{"name":"app","containerID":"containerd://fedcba9876543210","state":{"running":{}}}]}}]}`
	specs, err := specsFrom([]byte(body))
	if err != nil || len(specs) != 2 {
		t.Fatalf("%v %+v", err, specs)
	}
	got := map[string]spec{}
	for _, s := range specs {
		got[s.Container] = s
	}
	if got["mesh"].CPULimit != "200m" || got["mesh"].ContainerID != "containerd://0123456789abcdef" || got["mesh"].Primary {
		t.Errorf("sidecar: %+v", got["mesh"])
	}
	if !got["app"].Primary {
		t.Errorf("app: %+v", got["app"])
	}
}

// Pod-level resources (KEP-2837): a CPU limit on the pod, none on its containers. The pod's
// cgroup carries the quota and freezes them all: its containers are watched, the first the
// pod's primary (the one whose pod level fires), each with the limit that binds it.
func TestPodLevelLimitIsWatched(t *testing.T) {
	body := `{"items":[{"metadata":{"name":"p","namespace":"n","uid":"0b6c4a3e-1f2d-4c5b-8a7e-9d0c1b2a3f4e"},
	 "spec":{"resources":{"limits":{"cpu":"700m"}},
	   "containers":[{"name":"app"},{"name":"helper","resources":{"limits":{"cpu":"100m"}}}]},
	 "status":{"phase":"Running","qosClass":"Burstable","containerStatuses":[
	   {"name":"app","containerID":"containerd://fedcba9876543210","state":{"running":{}}},
	   {"name":"helper","containerID":"containerd://0123456789abcdef","state":{"running":{}}}]}}]}`
	specs, err := specsFrom([]byte(body))
	if err != nil || len(specs) != 2 {
		t.Fatalf("%v %+v", err, specs)
	}
	if specs[0].Container != "app" || specs[0].CPULimit != "700m" || !specs[0].Primary {
		t.Errorf("app: %+v", specs[0])
	}
	if specs[1].CPULimit != "100m" || specs[1].Primary {
		t.Errorf("helper: %+v", specs[1])
	}
}

// A static pod's cgroups carry the UID the kubelet derived from its manifest, which the API
// shows only in the mirror pod's kubernetes.io/config.mirror annotation.
func TestStaticPodIsFoundByTheKubeletsUID(t *testing.T) {
	body := `{"items":[{"metadata":{"name":"etcd-n1","namespace":"kube-system","uid":"7d3f0c2a-9b1e-4f6d-8c5a-2e4b6a8c0d1f",
	   "annotations":{"kubernetes.io/config.mirror":"6576683a93d91d8e2119df2c2755f2f1","kubernetes.io/config.source":"file"}},
	 "spec":{"containers":[{"name":"etcd","resources":{"limits":{"cpu":"500m"}}}]},
	 "status":{"phase":"Running","qosClass":"Burstable","containerStatuses":[
	   {"name":"etcd","containerID":"containerd://fedcba9876543210","state":{"running":{}}}]}}]}`
	specs, err := specsFrom([]byte(body))
	if err != nil || len(specs) != 1 || specs[0].UID != "6576683a93d91d8e2119df2c2755f2f1" {
		t.Fatalf("%v %+v", err, specs)
	}
}
