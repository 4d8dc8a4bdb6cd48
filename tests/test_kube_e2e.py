"""`gmpanalysis collect` against a real single-node Kubernetes started on this machine
(gmpanalysis.kube.local, driving the cluster scripts in scripts/cluster): real pods, real CFS
quotas from limits.cpu, real exec and port-forward, both cgroup levels (the container's and
the pod's, each with its own bandwidth timer), in-place resizes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pytest
from spinner_truth import ATTEMPTS, MIN_APART_MS, check_against_truth

import gmpanalysis as gmp
from gmpanalysis.gomaxprocs import explain
from gmpanalysis.goversion import go_version_from_header
from gmpanalysis.kube import local
from gmpanalysis.kube.trace import REFUSED_ATTEMPTS

DEPLOY = local.DEPLOY

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(local.unavailable_reason() is not None, reason=str(local.unavailable_reason())),
]


def wait_running(core, timeout=120):
    return local.wait_running(core, timeout)


def load(bins, seconds, rate=40):
    return local.start_load(bins, seconds, rate)


def collect_argv(cluster, out, seconds, *target):
    """`gmpanalysis collect` of ``target`` (--pod NAME or -l SELECTOR, and --pprof-port)."""
    return [
        sys.executable, "-m", "gmpanalysis.cli", "collect", "--kubeconfig", cluster["kubeconfig"], "-n", "default",
        "--duration", f"{seconds}s", "--out", str(out), *target,
    ]  # fmt: skip


def collect_cli(cluster, out, seconds, *extra):
    # (a later --pprof-port in extra wins over the default target's)
    argv = collect_argv(cluster, out, seconds, "-l", "app=gmp-demoapp", "--pprof-port", "18181", *extra)
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_collect_records_real_throttling(cluster, bins, tmp_path):
    lg = load(bins, 14)
    try:
        r = collect_cli(cluster, tmp_path, 10)
    finally:
        lg.wait(60)
    assert r.returncode == 0, r.stderr
    bundle = Path(r.stdout.strip().splitlines()[-1])
    run = gmp.load_run(bundle)
    m = run.meta
    assert run.notes == [] and m["complete"] is True and m["source"] == "kube"
    assert (m["quota_us"], m["period_us"]) == (50_000, 100_000)
    assert m["cpu_limit"] == "500m" and m["gomaxprocs_env"] == "2" and m["qos"] == "Burstable"
    assert m["cgroup_version"] == 1 and m["cgroup_paths"][0].startswith("kubepods/burstable/pod")
    # both levels, the container's first; the kubelet gives the pod cgroup the sum of its
    # containers' limits, on a timer of its own
    assert [(x["level"], x["quota_us"]) for x in m["levels"]] == [("container", 50_000), ("pod", 50_000)]
    assert m["levels"][0]["cgroup"].startswith(m["levels"][1]["cgroup"] + "/")
    assert sorted(run.limits["cgroup"]) == ["container", "pod"] and run.limits["prev_ns"].isna().all()
    # what the trace tells of a process the collector cannot ask
    assert m["gomaxprocs_effective"] == 2 and m["go_version"] == go_version_from_header(run.trace.meta["version"])
    s = run.samples
    assert len(s) > 5000
    assert s["nr_throttled"].iloc[-1] - s["nr_throttled"].iloc[0] > 0
    assert m["trace"].get("complete"), m["trace"]
    assert run.trace.meta["events"] > 1000
    # the samples cover the trace's whole span: they went on until its body had ended, and
    # then the sampler was told to stop through its stdin
    t = s["t_ns"].to_numpy()
    assert t[0] <= run.trace.meta["first_ns"] and run.trace.meta["last_ns"] <= t[-1]
    assert m["sampler"]["stop_reason"] == "stdin", m["sampler"]
    per = gmp.df_periods(run)
    assert per["throttled"].sum() > 20
    assert set(per["gomaxprocs"].dropna()) == {2.0}
    # a pod's bundle has no requests: the advisor replays its measured CPU (no latency to
    # rank by); a quarter CPU throttles it more than all the node's CPUs, and no limit none
    ncpu = float(run.meta["ncpu"])
    adv = gmp.advise(run, objective="throttle", limits=(0.25, ncpu), gomaxprocs=(2,), bursts=(0,))
    assert adv.attrs["recommendation"].startswith("For throttle: a CPU limit of")
    by = adv.set_index("limit_cpu")["throttled_pct"]
    assert by[0.25] > by[ncpu] and adv["p99_ms"].isna().all()
    assert not gmp.what_if(run, unlimited=True)["throttled"].any()
    # the sampler ran in the pod cgroup of its DaemonSet: no RT budget there, so SCHED_FIFO is
    # refused and the sampler said so
    assert m["sampler"]["policy"] == "SCHED_OTHER"
    assert m["sampler"]["policy_error"].startswith("SCHED_FIFO refused")


def test_container_restart_mid_window_is_segmented(cluster, bins, tmp_path):
    core = cluster["core"]
    pod = wait_running(core)
    cid = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    lg = load(bins, 14)
    box = {}
    t = threading.Thread(target=lambda: box.update(r=collect_cli(cluster, tmp_path, 10)))
    t.start()
    # kill once the old container's samples stream (a fixed sleep raced a slow start on a
    # loaded node: the collection then began on the new container and saw no restart)
    wait_rows(tmp_path, 1000)
    time.sleep(1)
    # a real restart: kill the container's task; the kubelet starts a new container
    subprocess.run(["ctr", "-a", cluster["sock"], "-n", "k8s.io", "task", "kill", "-s", "SIGKILL", cid], check=True)
    t.join(120)
    lg.wait(60)
    r = box["r"]
    run = gmp.load_run(next(tmp_path.iterdir()))
    assert len(run.meta["restarts"]) == 1 and run.meta["restarts"][0]["old"].endswith(cid)
    # the samples followed the restart; the exit fails exactly when the trace came out cut
    assert run.meta["complete"] is True
    assert (r.returncode == 0) == bool(run.meta["trace"].get("complete")), r.stderr
    # a kill during the trace request cuts the trace (kept, flagged); a request that reached
    # the new container after the restart gets a whole one: either way the flag must be true
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gmp.gotrace.TruncatedTraceWarning)
        # a restart before the first trace byte leaves no trace at all: that is cut too
        cut = run.trace is None or run.trace.meta["truncated"] is not None
    assert bool(run.meta["trace"].get("complete")) == (not cut)
    per = gmp.df_periods(run)
    assert set(per["segment"]) == {0, 1}  # the new container's cgroup: counters restart, new phase
    # the restart is recorded on the samples' clock: the old container's last read, the new
    # one's first after it, which is where the container level's segment starts
    own = run.samples[run.samples["cgroup"] == "container"]
    at = run.meta["restarts"][0]["mono_ns"]
    first_new = int(np.searchsorted(own["t_ns"].to_numpy(), at, side="right"))
    assert 0 < first_new < len(own), (at, own["t_ns"].iloc[[0, -1]].tolist())
    grid = gmp.analyze(run).grid
    assert [g.first_row for g in grid.segments][1] == first_new, ([g.first_row for g in grid.segments], first_new)
    # the pod's cgroup outlived the container: sampled again by the new exec, the files continued
    assert set(run.samples["cgroup"]) == {"container", "pod"}
    assert run.limits["cgroup"].tolist() == ["container", "pod", "container", "pod"]
    assert run.meta["levels"][0]["cgroup"].endswith(cid) and len(run.meta["sampler"]["execs"]) == 2
    wait_running(core)


def test_pod_deleted_mid_collection(cluster, bins, tmp_path):
    core = cluster["core"]
    pod = wait_running(core)
    box = {}
    t = threading.Thread(target=lambda: box.update(r=collect_cli(cluster, tmp_path, 20)))
    t.start()
    # delete once the collection has streamed samples (a fixed sleep raced a slow start on a
    # loaded node): what was collected must survive the deletion
    wait_rows(tmp_path, 2100, alive=t.is_alive)
    core.delete_namespaced_pod(pod.metadata.name, "default", grace_period_seconds=1)
    t.join(120)
    r = box["r"]
    assert r.returncode != 0
    assert pod.metadata.name in r.stderr and ("being deleted" in r.stderr or "disappeared" in r.stderr)
    assert "the samples collected so far are in" in r.stderr
    bundle = next(tmp_path.iterdir())
    run = gmp.load_run(bundle)
    assert run.meta["complete"] is False and any("did not finish" in n for n in run.notes)
    assert len(run.samples) > 2000  # streamed before the deletion
    # the port-forward dropped with the pod: the trace is flagged, and whatever arrived is kept
    assert not run.meta["trace"].get("complete")
    wait_running(core)


@pytest.mark.parametrize("after_s", [0.0, 3.0])
def test_collector_killed_outright_leaves_a_loadable_bundle(cluster, bins, tmp_path, after_s):
    """SIGKILL of `gmpanalysis collect` (no clean-up runs) at once, or mid-window: meta.json
    was valid from the first write, the samples streamed so far are on disk, the bundle loads."""
    wait_running(cluster["core"])
    lg = load(bins, 8)
    cmd = [
        sys.executable, "-m", "gmpanalysis.cli", "collect", "--kubeconfig", cluster["kubeconfig"], "-n", "default",
        "-l", "app=gmp-demoapp", "--duration", "20s", "--pprof-port", "18181", "--out", str(tmp_path),
    ]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        if after_s:
            # the window counts from the first streamed sample: the exec into the sampler pod
            # can take seconds to start on a loaded node
            wait_rows(tmp_path, 1, alive=lambda: p.poll() is None)
        else:
            deadline = time.monotonic() + 60
            while not any(tmp_path.glob("*/meta.json")) and time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(after_s)
        p.send_signal(9)
        p.wait(30)
    finally:
        p.kill()
        lg.wait(30)
    bundle = next(tmp_path.iterdir())
    run = gmp.load_run(bundle)
    assert run.meta["complete"] is False and run.meta["source"] == "kube"
    if after_s:
        assert len(run.samples) > 1000  # ~3 s at 997 µs, appended as they arrived
    wait_running(cluster["core"])


def test_no_pprof_port_still_collects_samples(cluster, bins, tmp_path):
    wait_running(cluster["core"])
    r = collect_cli(cluster, tmp_path, 3, "--pprof-port", "18999")
    # a part that was asked for is missing: a failing exit that says so, the samples kept
    assert r.returncode != 0, r.stderr
    assert "the trace is incomplete or absent" in r.stderr and "the samples are complete in" in r.stderr
    run = gmp.load_run(next(tmp_path.iterdir()))
    assert len(run.samples) > 1500 and run.meta["complete"] is True
    assert run.meta["trace"]["complete"] is False and "18999" in run.meta["trace"]["error"]
    # said as it is, once the API server reports the refusal: no retries to the end, and no
    # traceback of the client library's proxy thread in the output
    assert "nothing listens on port 18999" in r.stderr, r.stderr
    assert "Exception in thread" not in r.stderr + r.stdout, r.stderr
    assert run.meta["trace"]["attempts"] <= REFUSED_ATTEMPTS


STATIC = "app=gmp-static"


def test_a_static_pod_is_collected_under_the_kubelet_s_uid(cluster, tmp_path):
    """A static pod (a manifest in the kubelet's staticPodPath, as etcd's and the API
    server's are) runs under a UID the kubelet derives from the file, and its cgroups are
    named after that one; the API shows a mirror pod with a UID of its own. Collected by its
    mirror's name, the samples come from its real cgroups."""
    core = cluster["core"]
    body = bare_pod("gmp-static", SPINNER)
    body["metadata"]["namespace"] = "default"
    body["metadata"]["labels"] = {"app": "gmp-static"}
    manifest = Path(cluster["base"]) / "manifests" / "gmp-static.json"
    manifest.write_text(json.dumps(body))
    try:
        deadline, mirror = time.monotonic() + 90, None
        while time.monotonic() < deadline:
            items = core.list_namespaced_pod("default", label_selector=STATIC).items
            running = [p for p in items if p.status.container_statuses and p.status.container_statuses[0].state.running]
            if running:
                mirror = running[0]
                break
            time.sleep(0.25)
        assert mirror is not None, "the kubelet did not start the static pod"
        kubelet_uid = mirror.metadata.annotations["kubernetes.io/config.mirror"]
        assert kubelet_uid != mirror.metadata.uid
        argv = collect_argv(cluster, tmp_path, 3, "--pod", mirror.metadata.name, "--pprof-port", "0")
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        run = gmp.load_run(next(tmp_path.iterdir()))
        assert run.meta["pod_uid"] == kubelet_uid and run.meta["complete"] is True
        assert len(run.samples) > 1500 and run.samples["nr_throttled"].iloc[-1] > run.samples["nr_throttled"].iloc[0]
    finally:
        manifest.unlink(missing_ok=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and core.list_namespaced_pod("default", label_selector=STATIC).items:
            time.sleep(0.25)


def bare_pod(name, command, env=(), image=None, limit="500m", request="100m"):
    """A bare Pod (no controller) on the host network, limits.cpu ``limit`` over a smaller
    request: Burstable, so the pod's cgroup sits under kubepods/burstable with a quota of
    its own (the sum of its containers' limits)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "gmp-e2e"}},
        "spec": {
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "app",
                    "image": image or f"localhost/{command[0].lstrip('/')}:dev",
                    "imagePullPolicy": "Never",
                    "command": list(command),
                    "env": [{"name": k, "value": v} for k, v in env],
                    "resources": {"requests": {"cpu": request}, "limits": {"cpu": limit}},
                }
            ],
        },
    }


def wait_rows(bundles: Path, n: int, alive=lambda: True, timeout: float = 90) -> None:
    """Wait until a collection under ``bundles`` has streamed more than ``n`` sample rows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        csvs = list(bundles.glob("*/cpu_stat.csv"))
        if csvs and csvs[0].read_bytes().count(b"\n") > n:
            return
        time.sleep(0.1)


def start_pods(core, bodies, timeout=90):
    """Create the pods and wait until every container runs."""
    for b in bodies:
        core.create_namespaced_pod("default", b)
    names = {b["metadata"]["name"] for b in bodies}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = [core.read_namespaced_pod(n, "default") for n in sorted(names)]
        if all(p.status.container_statuses and p.status.container_statuses[0].state.running for p in pods):
            return pods
        time.sleep(0.25)
    raise AssertionError(f"pods not running after {timeout} s: {[(p.metadata.name, p.status.phase) for p in pods]}")


def delete_pods(core, names):
    from kubernetes.client.rest import ApiException

    for n in names:
        try:
            core.delete_namespaced_pod(n, "default", grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise


SPINNER = ["/gmp-spinner", "--threads", "2", "--gap", "1ms", "--duration", "40s", "--out", "-"]


def test_two_timers_in_a_pod_against_the_spinners_truth(cluster, tmp_path):
    """A pod at 0.5 CPU running two spinning threads: the container's and the pod's quota
    (the kubelet's sum, here equal) both freeze it, each on its own timer at a random phase;
    every freeze the table shows is one the spinner saw, ended by one level's boundary.
    When the two timers fire too close together to tell apart, the pod is made anew."""
    core = cluster["core"]
    wait_running(core)
    # The truth is about freezes. On a busy node a sampler under SCHED_OTHER misses reads for
    # tens of ms (holes the table flags; test_collect_records_real_throttling checks the
    # refusal of SCHED_FIFO) and a host CPU hog stops the spinner's threads as if frozen:
    # here the node grants the sampler an RT budget, as an administrator of a kernel with RT
    # group scheduling can, and puts its pods ahead of host processes, as the lab does.
    with local.measurement_priority():
        run, offsets = spinner_run(cluster, tmp_path)
    assert run.meta["sampler"]["policy"].startswith("SCHED_FIFO"), run.meta["sampler"]
    stats = check_against_truth(run)
    pp = gmp.df_periods(run, level="pod")
    assert pp["throttled"].fillna(False).mean() > 0.8  # the pod's own timer throttled it too
    print(f"spinner truth: tries {len(offsets)}, pod offsets {offsets} ms, {stats}")


def spinner_run(cluster, tmp_path):
    """A collection from a spinner pod whose two timers are far enough apart to tell apart."""
    core = cluster["core"]
    offsets = []
    for attempt in range(ATTEMPTS):
        name = f"gmp-spinner-{attempt}"
        # requested near its limit, so that on a busy node the spinner stops for its quota,
        # not for its weight (the truth is about freezes; stalls are dropped, but must be few)
        start_pods(core, [bare_pod(name, SPINNER, request="400m")])
        try:
            r = subprocess.run(
                collect_argv(cluster, tmp_path / name, 10, "--pod", name, "--pprof-port", "0"),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert r.returncode == 0, r.stderr
            bundle = Path(r.stdout.strip().splitlines()[-1])
            # the spinner's stdout is the container's log: its gaps so far, whole lines
            (bundle / "spinner.jsonl").write_text(core.read_namespaced_pod_log(name, "default"))
        finally:
            delete_pods(core, [name])
        run = gmp.load_run(bundle)
        assert [(x["level"], x["quota_us"]) for x in run.meta["levels"]] == [("container", 50_000), ("pod", 50_000)]
        off = float(gmp.df_levels(run)["offset_ms"].iloc[1])
        offsets.append(round(off, 1))
        if min(off, 100.0 - off) >= MIN_APART_MS:
            return run, offsets
    pytest.fail(f"{ATTEMPTS} pods in a row had timers closer than {MIN_APART_MS} ms ({offsets}): phases not random?")


DEMO_ARGS = ["-work-ms", "20", "-iters-per-ms", "600000"]
# how each pod's runtime picks GOMAXPROCS (GOMAXPROCS=1 in env; automaxprocs: max(1,
# floor(limit)) once at start; the Go 1.25+ default: min(CPUs, max(2, ceil(limit))), re-read
# about once a second) and the port it serves on
RESIZED = {
    "pinned": ("/gmp-demoapp", [("GOMAXPROCS", "1")], 18191),
    "automaxprocs": ("/gmp-demoapp-automaxprocs", [], 18192),
    "default": ("/gmp-demoapp", [], 18193),
}


def _resize_example() -> dict:
    """The resize patch collectors/deploy/README.md gives users (kubectl patch pod P
    --subresource resize -p '...'): tested here against the API server as written."""
    text = (Path(__file__).resolve().parents[1] / "collectors" / "deploy" / "README.md").read_text()
    m = re.search(r"--subresource resize \\\n\s*-p '([^']+)'", text)
    assert m, "collectors/deploy/README.md: no `kubectl patch pod P --subresource resize -p '...'` example"
    return json.loads(m.group(1))


def test_in_place_resize_mid_collection_and_gomaxprocs_drift(cluster, bins, tmp_path):
    """Three demo pods at 0.5 CPU, resized in place to 2 CPUs 4 s into a 10 s collection:
    the kubelet rewrites the container's and the pod's quota (limits.csv dates both), the
    per-period table switches quota at the resize and names it, and the GOMAXPROCS each
    runtime chose is set against the new limit: pinned by env, automaxprocs' value from the
    start, or the default rule, which gives 2 on a 2-CPU node either way."""
    core = cluster["core"]
    wait_running(core)
    names = {k: f"gmp-resize-{k}" for k in RESIZED}
    bodies = [
        bare_pod(names[k], [cmd, "-addr", f"127.0.0.1:{port}", *DEMO_ARGS], env, image=f"localhost{cmd}:dev")
        for k, (cmd, env, port) in RESIZED.items()
    ]
    procs, loads, info, patched = {}, [], {}, {}
    try:
        start_pods(core, bodies)
        for k, (_, _, port) in RESIZED.items():
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/info", timeout=2) as resp:
                        info[k] = json.load(resp)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        t_start = time.monotonic()
        for k, (_, _, port) in RESIZED.items():
            # a little work keeps each cgroup's period timer running (an idle group's stops)
            loads.append(local.start_load(bins, 16, rate=10, port=port))
            procs[k] = subprocess.Popen(
                collect_argv(cluster, tmp_path / k, 10, "--pod", names[k], "--pprof-port", str(port)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        # 4 s after every collection's first sample, and once every trace streams (its request
        # goes out beside the sampler's exec and can start later on a loaded node)
        body = _resize_example()  # collectors/deploy/README.md's, as kubectl sends it (strategic merge)
        deadline = time.monotonic() + 60
        while not all(
            any(f.stat().st_size > 0 for f in (tmp_path / k).glob(f"*/{name}"))
            for k in RESIZED
            for name in ("cpu_stat.csv", "trace.out")
        ):
            assert time.monotonic() < deadline, "no collection started"
            time.sleep(0.05)
        time.sleep(4)
        for k in RESIZED:
            t0 = time.monotonic_ns()
            core.patch_namespaced_pod_resize(
                names[k], "default", body, _content_type="application/strategic-merge-patch+json"
            )
            patched[k] = (t0, time.monotonic_ns())
        outs = {k: p.communicate(timeout=120) for k, p in procs.items()}
        wall = time.monotonic() - t_start
    finally:
        for p in [*procs.values(), *loads]:
            if p.poll() is None:
                p.kill()
            p.wait()
        delete_pods(core, names.values())
    lags, unnamed, calls = {}, {}, {}
    for k in RESIZED:
        assert procs[k].returncode == 0, outs[k][1]
        run = gmp.load_run(Path(outs[k][0].strip().splitlines()[-1]))
        m = run.meta
        t0, t1 = patched[k]
        calls[k] = round((t1 - t0) / 1e6)
        assert m["complete"] and m["trace"]["complete"], m["trace"]
        assert m["gomaxprocs_effective"] == info[k]["gomaxprocs"] and m["default_godebug"] is None
        # the header tells the format: the release that wrote it is that one or a later one
        assert m["go_version"] == go_version_from_header(run.trace.meta["version"])
        assert int(info[k]["go_version"].split(".")[1]) >= run.trace.meta["version"]
        assert [(x["level"], x["quota_us"]) for x in m["levels"]] == [("container", 50_000), ("pod", 50_000)]
        # the kubelet rewrote both quotas after the patch: the change lies in (prev_ns, t_ns]
        lim = run.limits
        ch = lim[lim["prev_ns"].notna()]
        assert sorted(ch["cgroup"]) == ["container", "pod"] and set(ch["quota_us"]) == {200_000}, lim
        for row in ch.itertuples(index=False):
            # the kubelet writes after the patch; the read before the write may precede the
            # patch only when that read was late
            assert t0 < row.t_ns < t0 + 15_000_000_000, (row, t0)
            # the limits are read every 10 ms, but a sampler under SCHED_OTHER on a busy node
            # (the DaemonSet pod has no RT budget) wakes up to ~100 ms late: a wider bracket
            assert row.t_ns - row.prev_ns <= 1_000_000_000
            lags[(k, row.cgroup)] = (round((row.t_ns - t0) / 1e6), round((row.t_ns - row.prev_ns) / 1e6))
        # the trace covers the resize
        tr = run.trace
        assert tr.meta["first_ns"] < t0 and tr.meta["last_ns"] > ch["t_ns"].max()
        per = gmp.df_periods(run)
        q = per["quota_us"].dropna()
        assert q.iloc[0] == 50_000 and q.iloc[-1] == 200_000 and set(q) == {50_000, 200_000}
        # the periods the change interval touches name it (checked last, for all three pods)
        a, b = ch.loc[ch["cgroup"] == "container", ["prev_ns", "t_ns"]].iloc[0]
        touched = per[(per["end_ns"] > a) & (per["start_ns"] < b)]
        if not touched["reason"].fillna("").str.contains("quota 50000 µs -> 200000 µs").all():
            unnamed[k] = touched[["period", "quota_us", "reason"]].to_dict("records")
        g = gmp.df_gomaxprocs(run)
        drift = " ".join(g["drift"])
        if k == "pinned":
            assert "env" in g.attrs["rule"].split(", "), g.attrs
            assert "pinned by GOMAXPROCS=1" in drift, g[["event", "gomaxprocs", "drift"]]
        elif k == "automaxprocs":
            assert g.attrs["rule"] == "automaxprocs", g.attrs
            assert "automaxprocs set 1 once" in drift, g[["event", "gomaxprocs", "drift"]]
        else:
            assert g.attrs["rule"] == "go1.25 default", g.attrs
            assert "no change was due" in explain(run), explain(run)
        assert set(g["gomaxprocs"].dropna()) == {info[k]["gomaxprocs"]}  # none of them changed it
    print(
        f"resize: patch calls {calls} ms; (patch start -> limits row t_ns, its bracket) ms {lags}; "
        f"collections took {wall:.1f} s"
    )
    assert not unnamed, f"periods holding the limit change do not name it: {unnamed}"


def _limited_kubeconfig(cluster, tmp_path, bind_exec_and_forward):
    """A ServiceAccount that may get/list pods (gmp-collector) and, optionally, exec in
    gmp-system and port-forward in default: exactly what collectors/deploy/rbac.yaml grants."""
    import kubernetes

    core = cluster["core"]
    rbac = kubernetes.client.RbacAuthorizationV1Api(core.api_client)
    name = f"gmp-limited-{int(bind_exec_and_forward)}"
    core.create_namespaced_service_account("default", {"metadata": {"name": name}})
    subj = [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "subjects": subj,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gmp-collector"},
        }
    )
    if bind_exec_and_forward:
        rbac.create_namespaced_role_binding(
            "gmp-system",
            {
                "metadata": {"name": name},
                "subjects": subj,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gmp-collector-exec"},
            },
        )
        rbac.create_namespaced_role_binding(
            "default",
            {
                "metadata": {"name": name},
                "subjects": subj,
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "gmp-collector-target",
                },
            },
        )
    tok = core.create_namespaced_service_account_token(name, "default", {"spec": {"expirationSeconds": 3600}})
    admin = Path(cluster["kubeconfig"]).read_text()
    server = admin.split('server: "', 1)[1].split('"', 1)[0]
    ca = admin.split("certificate-authority-data: ", 1)[1].split("}", 1)[0].strip()
    kc = tmp_path / f"{name}.kubeconfig"
    kc.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}", certificate-authority-data: {ca}}}}}]
users: [{{name: u, user: {{token: {tok.status.token}}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
""")
    return str(kc)


def test_rbac_forbidden_names_verb_and_resource_and_the_manifest_grants_enough(cluster, bins, tmp_path):
    wait_running(cluster["core"])
    no_exec = _limited_kubeconfig(cluster, tmp_path, False)
    r = collect_cli({**cluster, "kubeconfig": no_exec}, tmp_path / "a", 2)
    assert r.returncode != 0
    assert "forbidden: cannot create pods/exec in namespace 'gmp-system'" in r.stderr
    assert "collectors/deploy/rbac.yaml" in r.stderr
    enough = _limited_kubeconfig(cluster, tmp_path, True)
    r = collect_cli({**cluster, "kubeconfig": enough}, tmp_path / "b", 3)
    assert r.returncode == 0, r.stderr
    run = gmp.load_run(Path(r.stdout.strip().splitlines()[-1]))
    assert len(run.samples) > 1500 and run.meta["trace"]["complete"]


def test_zz_no_sampler_pod_names_the_manifest(cluster, tmp_path):
    """Runs last in this module: it removes the sampler DaemonSet."""
    import kubernetes

    apps = kubernetes.client.AppsV1Api(cluster["core"].api_client)
    apps.delete_namespaced_daemon_set("gmp-sampler", "gmp-system", grace_period_seconds=0)
    deadline = time.monotonic() + 60
    while cluster["core"].list_namespaced_pod("gmp-system").items and time.monotonic() < deadline:
        time.sleep(0.5)
    r = collect_cli(cluster, tmp_path, 2)
    assert r.returncode != 0
    assert "no running sampler pod on node" in r.stderr and "collectors/deploy/sampler.yaml" in r.stderr
