package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/bundle"
)

func schema(t *testing.T) *bundle.Schema {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "gmpanalysis", "bundle-meta.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := bundle.ParseSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A PodList as the API server sends it (the fields the agent reads, one pod with a limit
// and a pprof annotation, one without a limit, one not running).
const podListJSON = `{"kind":"PodList","items":[
 {"metadata":{"name":"web-7d9c5b6f4-x2x9z","namespace":"shop","uid":"0b6c4a3e-1f2d-4c5b-8a7e-9d0c1b2a3f4e",
   "labels":{"pod-template-hash":"7d9c5b6f4"},"annotations":{"gmpanalysis/pprof-port":"6060"},
   "ownerReferences":[{"kind":"ReplicaSet","name":"web-7d9c5b6f4","controller":true}]},
  "spec":{"nodeName":"n1","containers":[{"name":"app","resources":{"limits":{"cpu":"500m"}},
    "env":[{"name":"GOMAXPROCS","value":"2"}]},{"name":"sidecar","resources":{}}]},
  "status":{"phase":"Running","qosClass":"Burstable","podIP":"10.1.2.3","containerStatuses":[
    {"name":"app","containerID":"containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","restartCount":1,"state":{"running":{}}},
    {"name":"sidecar","containerID":"containerd://fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210","state":{"running":{}}}]}},
 {"metadata":{"name":"job-1","namespace":"shop","uid":"1b6c4a3e-1f2d-4c5b-8a7e-9d0c1b2a3f4e"},
  "spec":{"nodeName":"n1","containers":[{"name":"c","resources":{"limits":{"cpu":"1"}}}]},
  "status":{"phase":"Succeeded","qosClass":"Burstable"}}]}`

func TestSpecsFrom(t *testing.T) {
	specs, err := specsFrom([]byte(podListJSON))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 1 {
		t.Fatalf("specs %+v: want the one running container with a CPU limit", specs)
	}
	s := specs[0]
	if s.Container != "app" || s.CPULimit != "500m" || s.PprofPort != 6060 || s.GomaxEnv == nil || *s.GomaxEnv != "2" ||
		s.Restarts != 1 || s.Owner == nil || s.Owner.Kind != "ReplicaSet" || s.QoS != "Burstable" {
		t.Fatalf("spec %+v", s)
	}
	w := &watched{spec: s}
	if got := w.workload(); got != "shop/web/app" {
		t.Fatalf("workload %q, want shop/web/app (the Deployment)", got)
	}
	if _, err := specsFrom([]byte(`{"items":[`)); err == nil {
		t.Fatal("a cut pod list was accepted")
	}
}

// The sampler's start line as gmp-sampler --summary stderr writes it (summary.go).
const startLine = `{"cgroups":[{"name":"container","path":"kubepods/burstable/pod0b6c/0123","version":1,"cpus":4,
 "limits":{"period_us":100000,"quota_us":50000,"burst_us":0}},{"name":"pod","path":"kubepods/burstable/pod0b6c",
 "version":1,"limits":{"period_us":100000,"quota_us":null,"burst_us":0}}],"interval_ns":997000,"policy":"SCHED_FIFO",
 "mono_start_ns":9007199254740993,"user_hz":100,"kernel":"6.1.0","ncpu":2}`

func TestMetaFollowsTheSchema(t *testing.T) {
	sch := schema(t)
	specs, _ := specsFrom([]byte(podListJSON))
	w := &watched{spec: specs[0], levels: []*level{{name: "container", v: verdict{Fire: true, Share: 0.4}}}}
	cfg := &config{interval: 997 * time.Microsecond, capture: 20 * time.Second, cluster: "prod", node: "n1"}
	m := newMeta(cfg, w, "shop-web-app-20261124T000000Z")
	check := func(what string) {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Check(b); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, b)
		}
	}
	check("at the start")
	facts, err := decodeFacts([]byte(startLine))
	if err != nil {
		t.Fatal(err)
	}
	recordSampler(m, facts, false)
	check("after the sampler's start line")
	if m["quota_us"] != int64(50000) || m["cgroup_version"] != int64(1) || len(m["levels"].([]any)) != 2 ||
		m["cpus_allowed"] != int64(4) {
		t.Fatalf("meta %v", m)
	}
	// a monotonic time past 2^53 stays exact
	b, _ := json.Marshal(m["sampler"])
	var back map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	_ = d.Decode(&back)
	if back["mono_start_ns"] != json.Number("9007199254740993") {
		t.Fatalf("mono_start_ns %v", back["mono_start_ns"])
	}
	m["complete"], m["mono_start_ns"], m["mono_end_ns"] = true, int64(1), int64(2)
	check("at the end")
}
