package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"time"
)

// decodeFacts decodes a JSON object keeping numbers exact: CLOCK_MONOTONIC nanoseconds pass
// 2^53 (float64's exact integers) after 104 days of uptime.
func decodeFacts(raw []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// asInt is a decoded JSON integer.
func asInt(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

// schemaVersion is the bundle contract's version (gmpanalysis/schema.py SCHEMA); the tests
// check every meta.json written here against the schema file generated from it.
const schemaVersion = 2

// newMeta is meta.json at the start of a capture: every key of the contract, null where not
// known yet, complete false. The names are the API server's, as it sent them.
func newMeta(cfg *config, t *watched, name string) map[string]any {
	s := t.spec
	str := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	m := map[string]any{
		"schema": schemaVersion, "source": "kube", "name": name, "complete": false,
		"namespace": str(s.Namespace), "pod": str(s.Pod), "container": str(s.Container), "node": str(s.Node),
		"pod_uid": str(s.UID), "container_id": str(s.ContainerID), "qos": str(s.QoS), "restart_count": nil,
		"period_us": 100_000, "quota_us": nil, "burst_us": nil, "cpu_limit": str(s.CPULimit),
		"gomaxprocs_env": nil, "gomaxprocs_effective": nil, "go_version": nil, "levels": []any{},
		"default_godebug": nil, "kernel": nil, "cgroup_version": nil, "cgroup_paths": []any{}, "ncpu": nil,
		"hz": nil, "user_hz": nil, "sampler": map[string]any{"interval_ns": cfg.interval.Nanoseconds()},
		"mono_start_ns": nil, "mono_end_ns": nil, "wall_start": time.Now().UTC().Format("2006-01-02T15:04:05.000+00:00"),
		"load": nil, "workload": nil, "trace": nil, "restarts": []any{}, "notes": []any{}, "error": nil,
		// outside the contract's fields (kept by readers): who captured and why
		"agent": map[string]any{"node": cfg.node, "go_version": runtime.Version(), "trigger": t.verdicts(),
			"trigger_rule": map[string]any{"periods": cfg.trig.periods, "share": cfg.trig.share,
				"frozen_cpu_s_per_min": cfg.trig.frozenPerMin}, "capture_ns": cfg.capture.Nanoseconds()},
	}
	if !t.static {
		m["restart_count"] = s.Restarts
	}
	if s.GomaxEnv != nil {
		m["gomaxprocs_env"] = *s.GomaxEnv
	}
	if cfg.cluster != "" {
		m["cluster"] = cfg.cluster
	}
	if s.Owner != nil {
		m["owner"] = s.Owner
	}
	if s.Deleting {
		m["notes"] = []any{"the pod was being deleted when the capture began"}
	}
	return m
}

// recordSampler puts the sampler's start facts (and at the end its summary) into meta: the
// cgroups it reads and the bandwidth settings the kernel holds for each (the levels, the
// container's own first, whose settings are the bundle's limits), the CPUs the container's
// threads may run on, the node's kernel and CPUs, and the summary itself under "sampler".
func recordSampler(meta map[string]any, facts map[string]any, final bool) {
	cgs, _ := facts["cgroups"].([]any)
	var levels, paths []any
	for i, x := range cgs {
		c, ok := x.(map[string]any)
		if !ok {
			continue
		}
		if v, ok := asInt(c["version"]); ok {
			meta["cgroup_version"] = v
		}
		if n, ok := asInt(c["cpus"]); ok && n > 0 && i == 0 {
			meta["cpus_allowed"] = n // the container's threads' CPUs (a cpuset: the static CPU manager)
		}
		if p, ok := c["path"].(string); ok {
			paths = append(paths, p)
		}
		lim, _ := c["limits"].(map[string]any)
		lv := map[string]any{"level": c["name"], "cgroup": c["path"], "period_us": nil, "quota_us": nil, "burst_us": nil}
		for _, k := range []string{"period_us", "quota_us", "burst_us"} {
			if v, ok := asInt(lim[k]); ok {
				lv[k] = v
				if i == 0 {
					meta[k] = v
				}
			} else if i == 0 && k == "quota_us" && lim != nil {
				meta[k] = nil // no quota
			}
		}
		levels = append(levels, lv)
	}
	if len(levels) > 0 {
		meta["levels"], meta["cgroup_paths"] = levels, paths
	}
	if k, ok := facts["kernel"].(string); ok && k != "" {
		meta["kernel"] = k
	}
	if n, ok := asInt(facts["ncpu"]); ok && n > 0 {
		meta["ncpu"] = n
	}
	if n, ok := asInt(facts["user_hz"]); ok && n > 0 {
		meta["user_hz"] = n
	}
	s, _ := meta["sampler"].(map[string]any)
	if s == nil {
		s = map[string]any{}
	}
	for k, v := range facts {
		if k != "cgroups" {
			s[k] = v
		}
	}
	if final {
		s["stopped"] = true
	}
	meta["sampler"] = s
}
