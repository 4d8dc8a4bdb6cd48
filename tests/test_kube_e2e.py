"""`gmpanalysis collect` against a real single-node Kubernetes started on this machine
(gmpanalysis.kube.local, driving the cluster scripts in ../shared/k8s): real pods, real CFS
quotas from limits.cpu, real exec and port-forward."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

import gmpanalysis as gmp
from gmpanalysis.kube import local

DEPLOY = local.DEPLOY

pytestmark = [pytest.mark.skipif(local.unavailable_reason() is not None, reason=str(local.unavailable_reason()))]


@pytest.fixture(scope="module")
def cluster(bins, tmp_path_factory):
    pytest.importorskip("kubernetes", reason="the [kube] extra is not installed")
    local.build()
    base = tmp_path_factory.mktemp("k8s")
    try:
        yield local.start(base, bins)
    finally:
        local.stop(base)


def wait_running(core, timeout=120):
    return local.wait_running(core, timeout)


def load(bins, seconds, rate=40):
    return local.start_load(bins, seconds, rate)


def collect_cli(cluster, out, seconds, *extra):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gmpanalysis.cli",
            "collect",
            "--kubeconfig",
            cluster["kubeconfig"],
            "-n",
            "default",
            "-l",
            "app=gmp-demoapp",
            "--duration",
            f"{seconds}s",
            "--pprof-port",
            "18181",
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


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
    s = run.samples
    assert len(s) > 5000
    assert s["nr_throttled"].iloc[-1] - s["nr_throttled"].iloc[0] > 0
    assert m["trace"].get("complete"), m["trace"]
    assert run.trace.meta["events"] > 1000
    per = gmp.df_periods(run)
    assert per["throttled"].sum() > 20
    assert set(per["gomaxprocs"].dropna()) == {2.0}
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
    time.sleep(4)
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
    wait_running(core)


def test_pod_deleted_mid_collection(cluster, bins, tmp_path):
    core = cluster["core"]
    pod = wait_running(core)
    box = {}
    t = threading.Thread(target=lambda: box.update(r=collect_cli(cluster, tmp_path, 20)))
    t.start()
    time.sleep(4)
    core.delete_namespaced_pod(pod.metadata.name, "default", grace_period_seconds=1)
    t.join(120)
    r = box["r"]
    assert r.returncode != 0
    assert pod.metadata.name in r.stderr and ("being deleted" in r.stderr or "disappeared" in r.stderr)
    assert "the samples collected so far are in" in r.stderr
    bundle = next(tmp_path.iterdir())
    run = gmp.load_run(bundle)
    assert run.meta["complete"] is False and any("did not finish" in n for n in run.notes)
    assert len(run.samples) > 2000  # ~4 s at 997 µs
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
