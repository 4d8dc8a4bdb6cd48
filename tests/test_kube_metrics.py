"""gmp-agent's Prometheus metrics on a real one-node Kubernetes: the agent is installed with
``helm install`` of charts/gmpanalysis (values for this cluster; `helm uninstall` at the end),
a demo pod is throttled, and /metrics, scraped through the API server's pod proxy, holds the counters of
the container's and the pod's cpu.stat as the test reads them on the node around the scrape:
every counter lies between the values read just before and just after it (equal where
nothing happened in between), the quota, period and GOMAXPROCS are the pod's, and the pod's
series leave the scrape once it is deleted. A real Prometheus server (scripts/prometheus.sh,
built once from the Go module proxy) scrapes the agent meanwhile: what it stores lies
between the node's reads too, and every query of the Grafana dashboard
(charts/gmpanalysis/dashboards/gmpanalysis.json) shows the throttled pod's numbers.

Run alone (it starts the local cluster; never beside another cluster run):
    .venv/bin/python -m pytest -p no:cacheprovider tests/test_kube_metrics.py -m kube
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import METRICS_PORT, agent_pod, go_tool, remove_agent, scrape, stop_procs

from gmpanalysis.kube import local

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(local.unavailable_reason() is not None, reason=str(local.unavailable_reason())),
]

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "gmpanalysis"
# 20 req/s of 20 ms is 0.4 CPU against 0.3: every period throttles, and the backlog left when
# the load stops (the demo app finishes every request it took) drains in seconds
NAME, LIMIT, PORT, RATE = "gmp-metrics-hot", "300m", 18195, 20
CPU = Path("/sys/fs/cgroup/cpu")  # the local cluster is cgroup v1 (local.unavailable_reason)
DASHBOARD = CHART / "dashboards" / "gmpanalysis.json"
PROM_PORT, SCRAPE_S = 19477, 1


def demo() -> dict:
    """collectors/deploy/demo.yaml's Deployment under another name, port and limit."""
    d = copy.deepcopy(next(x for x in yaml.safe_load_all((local.DEPLOY / "demo.yaml").read_text()) if x))
    label = {"app": NAME}
    d["metadata"] = {"name": NAME, "labels": label}
    d["spec"]["selector"]["matchLabels"] = label
    t = d["spec"]["template"]
    t["metadata"] = {"labels": label}
    c = t["spec"]["containers"][0]
    c["command"] = [x if x != "127.0.0.1:18181" else f"127.0.0.1:{PORT}" for x in c["command"]]
    c["ports"] = [{"name": "pprof", "containerPort": PORT}]
    c["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": LIMIT, "memory": "256Mi"}}
    return d


def helm_agent(cluster: dict, spool: Path, verb: str = "install") -> None:
    """``helm install`` (or ``uninstall``) of the chart's agent on this cluster, as a team
    installs it with one command: the API server's address (its service IP is not routed
    here), watch only (no capture pauses the reads), a short listing interval. The sampler
    and the collectors' roles are the cluster's already (the other kube tests use them), so
    this release leaves them out."""
    helm = go_tool("helm", "HELM")
    kube = ["--namespace", "gmp-system", "--kubeconfig", str(cluster["kubeconfig"])]
    if verb == "uninstall":
        cmd = [helm, "uninstall", "gmp-metrics", *kube, "--ignore-not-found", "--wait"]
    else:
        server = yaml.safe_load(Path(cluster["kubeconfig"]).read_text())["clusters"][0]["cluster"]["server"]
        cmd = [helm, "install", "gmp-metrics", str(CHART), *kube,
               "-f", str(CHART / "ci" / "manifests-values.yaml"),
               "--set", "createNamespace=false,sampler.enabled=false,collectorRoles.create=false",
               "--set", f"agent.apiServer={server},agent.listEvery=2s,agent.rateLimits.maxPerHour=0",
               "--set", f"agent.spool.hostPath={spool},metrics.port={METRICS_PORT}"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"helm {verb}: {r.stdout[-2000:]} {r.stderr[-3000:]}"


SERIES = re.compile(r"^(gmp_[a-z0-9_]+)\{([^}]*)\} (\S+)$")


def series(text: str, pod: str) -> dict[tuple[str, str], float]:
    """{(metric, level): value} of one pod's container ("app") and pod levels."""
    out = {}
    for line in text.splitlines():
        m = SERIES.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m[2]))
        if labels.get("pod") == pod and labels.get("namespace") == "default":
            out[(m[1], labels.get("level", ""))] = float(m[3])
    return out


def cpu_stat(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (ln.split() for ln in (path / "cpu.stat").read_text().splitlines())}


def started_pod(core):
    """The demo pod once its container has an ID (a pod can list as Running a moment
    before its container status carries one)."""
    deadline = time.monotonic() + 90
    while True:
        pods = core.list_namespaced_pod("default", label_selector=f"app={NAME}").items
        st = pods[0].status.container_statuses if pods else None
        if st and st[0].container_id:
            return pods[0]
        assert time.monotonic() < deadline, f"the demo pod's container has no ID after 90 s: {pods}"
        time.sleep(1)


def cgroup_dirs(pod) -> dict[str, Path]:
    """The demo pod's container and pod cgroups on this node (cgroupfs or systemd driver)."""
    uid, qos = pod.metadata.uid, pod.status.qos_class.lower()
    cid = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    us = uid.replace("-", "_")
    pods = [CPU / "kubepods" / qos / f"pod{uid}",
            CPU / "kubepods.slice" / f"kubepods-{qos}.slice" / f"kubepods-{qos}-pod{us}.slice"]  # fmt: skip
    for p in pods:
        for c in (p / cid, p / f"cri-containerd-{cid}.scope"):
            if (c / "cpu.stat").exists():
                return {"container": c, "pod": p}
    raise AssertionError(f"no cgroup of container {cid} under {pods}")


def check_counters(core, dirs: dict[str, Path], pod: str) -> tuple[dict, dict, dict]:
    """Read cpu.stat, wait past one agent read (--watch-every 1s), scrape, read again: each
    counter of each level lies between the two reads. Returns (before, after, scraped)."""
    before = {lv: cpu_stat(d) for lv, d in dirs.items()}
    time.sleep(2.5)
    text, route = scrape(core)
    after = {lv: cpu_stat(d) for lv, d in dirs.items()}
    got = series(text, pod)
    told = f"route {route}; before {before}; after {after}; scraped {got}"
    for lv in dirs:
        for metric, key, scale in (
            ("gmp_cfs_throttled_periods_total", "nr_throttled", 1),
            ("gmp_cfs_periods_total", "nr_periods", 1),
            ("gmp_cfs_throttled_seconds_total", "throttled_time", 1e-9),
        ):
            v = got[(metric, lv)]
            lo, hi = before[lv][key] * scale, after[lv][key] * scale
            assert lo - 1e-9 <= v <= hi + 1e-9, f"{metric}{{level={lv}}} {v} not in [{lo}, {hi}]: {told}"
    assert got[("gmp_cfs_throttled_periods_total", "container")] > 0, f"the pod never throttled: {told}"
    return before, after, got


# loopback only: no proxy from the environment between the test and its Prometheus
LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def start_prometheus(tmp_path: Path, target: str, procs: list) -> str:
    """A Prometheus server on loopback scraping ``target`` every SCRAPE_S seconds as job
    gmp-agent (the chart's ServiceMonitor names its job after the Service), put in
    ``procs`` as soon as it starts (the test's teardown ends it); its URL once it is ready."""
    prometheus = go_tool("prometheus", "PROMETHEUS")
    conf = tmp_path / "prometheus.yml"
    conf.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
                "scrape_configs": [{"job_name": "gmp-agent", "static_configs": [{"targets": [target]}]}],
            }
        )
    )
    url = f"http://127.0.0.1:{PROM_PORT}"
    with (tmp_path / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(
            [prometheus, f"--config.file={conf}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{PROM_PORT}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    procs.append(proc)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-3000:]}"
        try:
            with LOCAL.open(f"{url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return url
        except OSError:
            pass
        assert time.monotonic() < deadline, "prometheus not ready within 60 s"
        time.sleep(0.5)


def prom_query(url: str, expr: str) -> list[dict]:
    """An instant query through the HTTP API: its vector (a query Prometheus refuses fails)."""
    q = urllib.parse.urlencode({"query": expr})
    with LOCAL.open(f"{url}/api/v1/query?{q}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def dashboard_queries(pod: str) -> dict[str, list[str]]:
    """Each panel's queries, with the dashboard's variables set to the demo pod as a user
    picks it ($__rate_interval as Grafana sets it for a 1 s scrape: 4 intervals, here 10 s)."""
    values = {"$namespace": "default", "$pod": pod, "$container": "app", "$job": "gmp-agent",
              "$__rate_interval": "10s"}  # fmt: skip
    out: dict[str, list[str]] = {}
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for t in panel.get("targets", ()):
            expr = t["expr"]
            for k in sorted(values, key=len, reverse=True):
                expr = expr.replace(k, values[k])
            assert "$" not in expr, f"a variable the test does not set: {expr}"
            out.setdefault(panel["title"], []).append(expr)
    return out


def check_prometheus(url: str, dirs: dict[str, Path], pod: str) -> None:
    """What the server stored lies between two reads of the node's cpu.stat, and each of
    the dashboard's panels shows the pod (the throttled share, the frozen CPU-seconds, the
    quota against the CPU used, GOMAXPROCS) or the agent."""
    before = cpu_stat(dirs["container"])
    # an agent read (every 1 s) after `before`, then a scrape of it (every SCRAPE_S, taking up
    # to SCRAPE_S), with a second to spare
    time.sleep(1 + 2 * SCRAPE_S + 1)
    stored = prom_query(url, f'gmp_cfs_throttled_periods_total{{pod="{pod}",level="container"}}')
    after = cpu_stat(dirs["container"])
    assert len(stored) == 1, stored
    v = float(stored[0]["value"][1])
    assert before["nr_throttled"] <= v <= after["nr_throttled"], (before, v, after)
    pods = urllib.parse.urlencode({"match[]": 'gmp_cfs_periods_total{namespace="default"}'})
    with LOCAL.open(f"{url}/api/v1/label/pod/values?{pods}", timeout=10) as r:
        assert pod in json.loads(r.read())["data"], "the dashboard's pod picker would not list the pod"
    q = dashboard_queries(pod)

    def one(title: str, i: int = 0, **labels: str) -> float:
        got = [x for x in prom_query(url, q[title][i]) if all(x["metric"].get(k) == v for k, v in labels.items())]
        assert len(got) == 1, f"{title}: {q[title][i]} -> {got}"
        return float(got[0]["value"][1])

    assert 0.5 <= one("Throttled share of CFS periods", level="container") <= 1.0
    assert one("Throttled periods per second", level="container") > 0
    assert one("Frozen CPU-seconds per second", level="container") > 0
    used, limit = one("CPU used against the quota", 0), one("CPU used against the quota", 1)
    assert limit == pytest.approx(0.3) and 0.1 < used <= limit * 1.2, (used, limit)
    assert one("GOMAXPROCS against the CPU limit", 0) == 2
    assert one("GOMAXPROCS against the CPU limit", 1) == pytest.approx(0.3)
    assert one("Agent CPU", 1) >= 1 and one("Agent memory") > 0 and one("Agent CPU", 0) >= 0
    for expr in q["Captures"]:  # watch only: no capture, but every query is one Prometheus takes
        prom_query(url, expr)


def test_agent_metrics_match_cpu_stat(cluster, bins, tmp_path):
    from kubernetes import client

    core, api = cluster["core"], cluster["api"]
    apps = client.AppsV1Api(api)
    load = None
    procs: list[subprocess.Popen] = []
    try:
        apps.create_namespaced_deployment("default", demo())
        local.wait_running(core)
        helm_agent(cluster, tmp_path / "spool")
        pod = started_pod(core)
        name = pod.metadata.name
        dirs = cgroup_dirs(pod)
        # the agent runs, lists the pod (every 2 s) and has read its cgroups
        deadline = time.monotonic() + 90
        got: dict = {}
        while time.monotonic() < deadline:
            if agent_pod(core) is not None:
                try:
                    got = series(scrape(core)[0], name)
                except Exception:  # the metrics server may not listen yet
                    got = {}
                if ("gmp_cfs_periods_total", "pod") in got:
                    break
            time.sleep(2)
        assert ("gmp_cfs_periods_total", "container") in got, f"no series of {name} within 90 s: {got}"
        prom_url = start_prometheus(tmp_path, f"{agent_pod(core).status.pod_ip}:{METRICS_PORT}", procs)
        load = local.start_load(bins, 120, rate=RATE, port=PORT)
        time.sleep(5)  # a few seconds of throttling under the load
        # under load: the counters move between the reads, the scrape lies between them
        for _ in range(3):
            before, after, _ = check_counters(core, dirs, name)
            assert after["container"]["nr_throttled"] > before["container"]["nr_throttled"], (before, after)
        check_prometheus(prom_url, dirs, name)
        # the quota and period the kernel holds, GOMAXPROCS from the pod's env (demo.yaml: 2)
        got = series(scrape(core)[0], name)
        quota_us = int((dirs["container"] / "cpu.cfs_quota_us").read_text())
        assert got[("gmp_cfs_quota_seconds", "container")] == pytest.approx(quota_us / 1e6) == 0.03
        assert got[("gmp_cfs_period_seconds", "container")] == pytest.approx(0.1)
        assert got[("gmp_gomaxprocs", "")] == 2
        # load stopped and its backlog served: nothing throttles any more, the counters equal
        load.kill()
        load.wait()
        load = None
        quiet_deadline, last = time.monotonic() + 120, None
        while time.monotonic() < quiet_deadline:
            now = cpu_stat(dirs["container"])["nr_throttled"]
            if now == last:
                break
            last = now
            time.sleep(3)
        assert now == last, f"still throttled 120 s after the load stopped (nr_throttled {now})"
        before, after, got = check_counters(core, dirs, name)
        for lv in dirs:  # no throttle between the reads: the scrape equals them
            if before[lv]["nr_throttled"] == after[lv]["nr_throttled"]:
                assert got[("gmp_cfs_throttled_periods_total", lv)] == after[lv]["nr_throttled"]
        assert before["container"]["nr_throttled"] == after["container"]["nr_throttled"], "throttled while idle"
        # the pod deleted: its series leave the scrape at the next listing
        apps.delete_namespaced_deployment(NAME, "default")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and series(scrape(core)[0], name):
            time.sleep(2)
        assert series(scrape(core)[0], name) == {}, "the deleted pod's series stayed"
        assert agent_pod(core).status.container_statuses[0].restart_count == 0
    finally:
        if load is not None:
            load.kill()
            load.wait()
        stop_procs(procs)
        helm_agent(cluster, tmp_path / "spool", "uninstall")
        remove_agent(api, deployments=[(NAME, "default")], prefixes=(NAME, "gmp-agent"))
