"""gmp-agent on a real one-node Kubernetes with several Go pods: it lists its node's pods with
its own ServiceAccount (the RBAC of collectors/deploy/agent.yaml), triggers only for the
throttled ones, captures their bundles with traces, counts its triggers, captures and
refusals on /metrics as its log tells them (one counted complete capture per bundle on the
node), and the bundles go through the store and the fleet analysis on Dask into a fleet
report."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import remove_agent, scrape

import gmpanalysis as gmp
from gmpanalysis.fleet.compute import REPORT
from gmpanalysis.kube import local

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(local.unavailable_reason() is not None, reason=str(local.unavailable_reason())),
]

# name: (CPU limit, port, load in req/s of 20 ms): 0.8 CPU against 0.3 and 0.5 CPU throttles
# every period; 0.1 CPU against a whole CPU never does
PODS = {"hot": ("300m", 18191, 40), "warm": ("500m", 18192, 40), "cool": ("1", 18193, 5)}


def demo(name: str, limit: str, port: int) -> dict:
    """A Deployment of the demo app like collectors/deploy/demo.yaml's, on its own port, with
    the pprof annotation."""
    d = next(x for x in yaml.safe_load_all((local.DEPLOY / "demo.yaml").read_text()) if x)
    d = copy.deepcopy(d)
    label = {"app": f"gmp-agent-{name}"}
    d["metadata"] = {"name": f"gmp-agent-{name}", "labels": label}
    d["spec"]["selector"]["matchLabels"] = label
    t = d["spec"]["template"]
    t["metadata"] = {"labels": label, "annotations": {"gmpanalysis/pprof-port": str(port)}}
    c = t["spec"]["containers"][0]
    c["command"] = [x if x != "127.0.0.1:18181" else f"127.0.0.1:{port}" for x in c["command"]]
    c["ports"] = [{"name": "pprof", "containerPort": port}]
    # small requests: four demo pods fit on a 2-CPU node; the limits are what is watched
    c["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": limit, "memory": "256Mi"}}
    return d


def agent_docs(cluster: dict, out: Path) -> list[dict]:
    """agent.yaml as shipped, with what this cluster needs: the API server's address (the
    service IP is not routed here), the bundles' directory, a short capture and trigger."""
    server = yaml.safe_load(Path(cluster["kubeconfig"]).read_text())["clusters"][0]["cluster"]["server"]
    docs = [d for d in yaml.safe_load_all((local.DEPLOY / "agent.yaml").read_text()) if d]
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    spec["containers"][0]["command"] += [
        "--api", server, "--cluster", "local-test", "--list-every", "2s", "--trigger-periods", "20",
        "--trigger-share", "0.3", "--capture", "6s",
        # both throttled pods captured at once: one after the other, the second's trace is
        # served behind the backlog its open-loop overload has grown by then (12-44 s seen,
        # and once past the test's wait); one at a time is the Go tests' (agent_test.go)
        "--max-concurrent", "2",
    ]  # fmt: skip
    next(v for v in spec["volumes"] if v["name"] == "bundles")["hostPath"]["path"] = str(out)
    return docs


def agent_events(core) -> list[dict]:
    pods = core.list_namespaced_pod("gmp-system", label_selector="app.kubernetes.io/name=gmp-agent").items
    if not pods or pods[0].status.phase != "Running":
        return []
    text = core.read_namespaced_pod_log(pods[0].metadata.name, "gmp-system")
    return [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]


def test_agent_captures_the_throttled_pods_into_a_fleet_report(cluster, bins, tmp_path):
    from kubernetes import client, utils

    core, api = cluster["core"], cluster["api"]
    apps = client.AppsV1Api(api)
    spool = tmp_path / "spool"
    loads = []
    try:
        for name, (limit, port, _) in PODS.items():
            apps.create_namespaced_deployment("default", demo(name, limit, port))
        local.wait_running(core)
        for d in agent_docs(cluster, spool):
            utils.create_from_dict(api, d, namespace="gmp-system")
        for _, port, rate in PODS.values():
            loads.append(local.start_load(bins, 100, rate=rate, port=port))
        # each capture runs until its trace has ended (a throttled process serves it late)
        deadline = time.monotonic() + 150
        events: list[dict] = []
        while time.monotonic() < deadline:
            events = agent_events(core)
            if len([e for e in events if e["event"] == "capture"]) >= 2:
                break
            time.sleep(2)
        time.sleep(3)  # the cool pod keeps being judged under its light load
        events = agent_events(core)
        # one agent process throughout: a crash-looping agent would show only its last log
        agent_pod = core.list_namespaced_pod("gmp-system", label_selector="app.kubernetes.io/name=gmp-agent").items[0]
        assert agent_pod.status.container_statuses[0].restart_count == 0
        # the agent's own counters, scraped between two reads of its log: each counter
        # moves just before its log line is written
        before = agent_events(core)
        text, route = scrape(core)
        events = agent_events(core)
    finally:
        for lg in loads:
            lg.kill()
            lg.wait()
        # what this test made goes again (the next tests expect the demo pod alone)
        remove_agent(api, deployments=[(f"gmp-agent-{n}", "default") for n in PODS])
    watched = {e["pod"] for e in events if e["event"] == "watch"}
    # a listing may fail once on a loaded node (it is retried); nothing else may
    assert [e for e in errors(events) if "list pods" not in e["error"]] == []
    # every container with a limit on the node is watched (the demo pod and this test's three)
    assert {workload(p) for p in watched} >= {"hot", "warm", "cool"}
    assert any(p.startswith("gmp-demoapp-") for p in watched)
    fired = {workload(e["pod"]) for e in events if e["event"] == "trigger"}
    captured = [e for e in events if e["event"] == "capture"]
    assert fired == {"hot", "warm"}, events
    assert sorted(workload(e["pod"]) for e in captured) == ["hot", "warm"], events
    counted = exposition(text)
    for name, kinds in (
        ("gmp_triggers_total", lambda e: e["event"] == "trigger"),
        ('gmp_captures_total{outcome="complete"}', lambda e: e["event"] == "capture" and e["complete"]),
        ('gmp_captures_total{outcome="incomplete"}', lambda e: e["event"] == "capture" and not e["complete"]),
        ("gmp_capture_refusals_total", lambda e: e["event"] == "skip"),
    ):
        lo, hi = sum(map(kinds, before)), sum(map(kinds, events))
        assert lo <= counted.get(name, 0) <= hi, f"{name} = {counted.get(name)} ({route}); the log told {lo}-{hi}"
    # every complete capture counted is a bundle on the node
    bundles = [p for p in spool.iterdir() if p.name[0] != "."]
    assert counted['gmp_captures_total{outcome="complete"}'] == len(bundles) == 2, (counted, bundles)
    runs = []
    for e in captured:
        assert e["complete"] is True, e
        bundle = spool / Path(e["bundle"]).name  # the agent's path inside its pod is the node's spool
        run = gmp.load_run(bundle)
        m = run.meta
        limit = PODS[workload(m["pod"])][0]
        assert m["complete"] is True and m["source"] == "kube" and m["cluster"] == "local-test"
        assert m["cpu_limit"] == limit and m["gomaxprocs_env"] == "2"
        assert m["owner"]["kind"] == "ReplicaSet"
        assert [x["level"] for x in m["levels"]] == ["container", "pod"]
        assert m["agent"]["trigger"]["container"]["throttled_share"] >= 0.3
        assert m["trace"]["complete"] is True and run.trace is not None
        # the sampling ran until the trace ended: the samples cover the whole trace
        tm = run.trace.meta
        assert m["mono_start_ns"] <= tm["first_ns"] and tm["last_ns"] <= m["mono_end_ns"], (m, tm)
        per = gmp.df_periods(run)
        assert per["throttled"].mean() > 0.5
        runs.append(bundle)

    # the agent's bundles into a store, the fleet analysed on a local Dask cluster, the report
    store = tmp_path / "store"
    r = subprocess.run(
        [sys.executable, "-m", "gmpanalysis.cli", "store", "put", "--move", "--store", str(store), str(spool)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == len(runs)
    assert not any(p.name[0] != "." for p in spool.iterdir())  # moved: the spool is empty
    r = subprocess.run(
        [sys.executable, "-m", "gmpanalysis.cli", "fleet", str(store), "-o", str(tmp_path / "derived"),
         "--workers", "2", "--no-progress"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    summary = gmp.fleet.read_summary(tmp_path / "derived")
    assert sorted(summary["workload"]) == ["gmp-agent-hot", "gmp-agent-warm"]
    assert (summary["frozen_cpu_s"] > 0).all() and summary["error"].isna().all()
    html = (tmp_path / "derived" / REPORT).read_text()
    assert "gmp-agent-hot" in html and "gmp-agent-warm" in html


def workload(pod: str) -> str:
    m = re.match(r"gmp-agent-(\w+)-", pod)
    return m[1] if m else pod


def errors(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == "error"]


def exposition(text: str) -> dict[str, float]:
    """The gmp_ counters of a scrape by series (name{labels}), with a labelled counter's
    series also summed under its bare name."""
    out: dict[str, float] = {}
    for ln in text.splitlines():
        if not ln.startswith("gmp_"):
            continue
        series, value = ln.rsplit(" ", 1)
        out[series] = float(value)
        if "{" in series:
            bare = series.split("{", 1)[0]
            out[bare] = out.get(bare, 0.0) + float(value)
    return out
