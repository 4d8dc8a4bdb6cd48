"""A target pod that goes away ends its collection with a message naming it, whatever the
moment, without a cluster: the API and the sampler's exec are stand-ins that replay what a
real deletion looks like at each point.

Deleting a pod sets its deletion timestamp at once; the kubelet stops the containers and
removes their cgroups; the API object goes last. The sampler tells the cgroup going away
(exit 3) from a cgroup it could not find at the start of an exec (exit 2, "none of the
alternatives exists"): which of the two a deletion produces depends on when it happened, so
the collector must ask the API either way."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest

pytest.importorskip("kubernetes", reason="the [kube] extra is not installed")
from kubernetes.client.rest import ApiException  # noqa: E402

import gmpanalysis as gmp  # noqa: E402
from gmpanalysis.errors import CollectError  # noqa: E402
from gmpanalysis.kube.config import CollectConfig  # noqa: E402

# the module (gmpanalysis.kube exports a function of the same name)
kcollect = importlib.import_module("gmpanalysis.kube.collect")

UID = "0f2c9c1e-6a41-4a8e-9d0b-5d1c2e3f4a5b"
CID = "containerd://" + "ab" * 32
NAME = "gmp-demoapp-7d9f8c6b5-x2x4q"
ROWS = "t_ns,read_ns,usage_us,nr_periods,nr_throttled,throttled_us,nr_bursts,burst_us,cgroup\n" + "".join(
    f"{1_000_000 + i * 997_000},5000,{i * 400},{i // 100},0,0,0,0,container\n" for i in range(50)
)


def _pod(deleting: bool = False, uid: str = UID):
    container = SimpleNamespace(
        name="app",
        resources=SimpleNamespace(limits={"cpu": "500m"}),
        env=[SimpleNamespace(name="GOMAXPROCS", value="2")],
    )
    return SimpleNamespace(
        metadata=SimpleNamespace(
            name=NAME,
            namespace="default",
            uid=uid,
            annotations=None,
            deletion_timestamp="2026-01-01 00:00:04+00:00" if deleting else None,
            labels={"app": "gmp-demoapp"},
        ),
        spec=SimpleNamespace(containers=[container], node_name="node0"),
        status=SimpleNamespace(
            phase="Running",
            qos_class="Burstable",
            container_statuses=[SimpleNamespace(name="app", container_id=CID, restart_count=0)],
        ),
    )


class FakeCore:
    """CoreV1Api as far as the collector reads pods: ``states`` is what each successive read
    returns (a pod, or "404"); the last one repeats."""

    def __init__(self, *states):
        self.states = list(states)

    def read_namespaced_pod(self, name, namespace):
        s = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if s == "404":
            raise ApiException(status=404, reason="Not Found")
        return s

    def list_namespaced_pod(self, namespace, label_selector=None, **kw):
        return SimpleNamespace(items=[self.states[0]] if self.states[0] != "404" else [])


@pytest.fixture
def run_collect(monkeypatch, tmp_path):
    """collect_pod with the sampler's exec replaced by ``exec_fn(csv)``."""

    def go(core, exec_fn, **cfg):
        monkeypatch.setattr(kcollect, "sampler_pod", lambda core, cfg, node: "gmp-sampler-abcde")

        def fake_stream(core, cfg, sampler, targets, seconds, csv, log, on_start=None, until=None):
            return exec_fn(csv)

        monkeypatch.setattr(kcollect, "stream_sampler", fake_stream)
        c = CollectConfig(namespace="default", pod=NAME, duration_s=5, pprof_port=None, out=tmp_path, **cfg)
        logged: list[str] = []
        with pytest.raises(CollectError) as ei:
            kcollect.collect_pod(core, c, NAME, logged.append)
        return str(ei.value), next(tmp_path.iterdir())

    return go


def _exec_gone_then_missing():
    """The first exec samples until the container's cgroup disappears (exit 3); the next one,
    started for the restarted container while the kubelet is tearing the pod down, finds no
    cgroup at all (exit 2)."""
    calls = []

    def fn(csv):
        calls.append(1)
        if len(calls) == 1:
            csv.write_text(ROWS)
            return 3, "", {"stop_reason": "cgroup gone: kubepods/burstable/pod.../ab..."}
        return (
            2,
            f'gmp-sampler: cgroup "container=kube-container:{UID}:Burstable:...": none of the 2 alternatives exists',
            None,
        )

    return fn


def test_pod_deleted_before_an_exec_started_is_named_not_blamed_on_the_sampler(run_collect):
    # the pod stood when the collection began (reads 1 and 2), was deleted before the first
    # exec opened its cgroups: the sampler exits 2, and the message says why
    core = FakeCore(_pod(), _pod(deleting=True))
    msg, bundle = run_collect(core, lambda csv: (2, "gmp-sampler: none of the 2 alternatives exists", None))
    assert NAME in msg and "is being deleted" in msg
    assert "sampler stopped (exit 2)" in msg and "the samples collected so far are in" in msg
    meta = gmp.load_run(bundle).meta
    assert meta["complete"] is False and "being deleted" in meta["error"]


def test_pod_object_already_gone_when_the_sampler_fails(run_collect):
    core = FakeCore(_pod(), "404")
    msg, _ = run_collect(core, lambda csv: (2, "gmp-sampler: none of the 2 alternatives exists", None))
    assert NAME in msg and "disappeared" in msg


def test_container_restart_then_deletion_before_the_next_exec(run_collect):
    # exit 3: the container's cgroup went; the API shows a new container (a restart), whose
    # exec then finds nothing because the pod was deleted meanwhile
    restarted = _pod()
    restarted.status.container_statuses[0].container_id = "containerd://" + "cd" * 32
    core = FakeCore(_pod(), restarted, _pod(deleting=True))
    msg, bundle = run_collect(core, _exec_gone_then_missing())
    assert NAME in msg and "is being deleted" in msg and "sampler stopped (exit 2)" in msg
    run = gmp.load_run(bundle)
    assert len(run.samples) == 50 and len(run.meta["restarts"]) == 1


def test_cgroup_gone_while_the_pod_is_deleted(run_collect):
    # the path that always named the pod: exit 3, then the API shows the deletion
    def gone(csv):
        csv.write_text(ROWS)
        return 3, "", {"stop_reason": "cgroup gone: kubepods/burstable/pod.../ab..."}

    msg, _ = run_collect(FakeCore(_pod(), "404"), gone)
    assert NAME in msg and "disappeared mid-collection (404 Not Found)" in msg


def test_an_exec_that_breaks_off_when_the_pod_goes(run_collect):
    def broken(csv):
        csv.write_text(ROWS)
        raise TypeError("'NoneType' object is not subscriptable")  # no exit status on the closed websocket

    msg, _ = run_collect(FakeCore(_pod(), "404"), broken)
    assert NAME in msg and "disappeared" in msg and "the samples collected so far are in" in msg


def test_a_same_named_new_pod_is_not_the_target(run_collect):
    core = FakeCore(_pod(), _pod(uid="11111111-2222-3333-4444-555555555555"))
    msg, _ = run_collect(core, lambda csv: (2, "gmp-sampler: none of the 2 alternatives exists", None))
    assert NAME in msg and "disappeared" in msg and "a new pod of that name" in msg


def test_a_sampler_failure_while_the_pod_stands_is_the_samplers(run_collect):
    msg, _ = run_collect(FakeCore(_pod()), lambda csv: (4, "gmp-sampler: bad cgroup data: cpu.stat line 2", None))
    assert msg.startswith("sampler stopped (exit 4)") and "being deleted" not in msg and "disappeared" not in msg


def test_a_listed_pod_deleted_before_its_collection_started(monkeypatch, tmp_path):
    core = FakeCore("404")
    cfg = CollectConfig(namespace="default", selector="app=gmp-demoapp", pprof_port=None, out=tmp_path)
    with pytest.raises(CollectError, match=f"target pod {NAME} disappeared before its collection started"):
        kcollect.collect_pod(core, cfg, NAME, print, listed=True)
    # asked for by name, a missing pod is simply not found
    with pytest.raises(CollectError, match="pods not found"):
        kcollect.collect_pod(core, CollectConfig(namespace="default", pod=NAME, out=tmp_path), NAME, print)


def test_selector_leaves_out_pods_being_deleted(monkeypatch, tmp_path):
    core = FakeCore(_pod(deleting=True))
    monkeypatch.setattr(kcollect, "kube_client", lambda cfg: core)
    cfg = CollectConfig(namespace="default", selector="app=gmp-demoapp", pprof_port=None, out=tmp_path)
    logged: list[str] = []
    with pytest.raises(CollectError, match=f"no running pod matches .*being deleted: {NAME}"):
        kcollect.collect(cfg, logged.append)
    assert logged == [f"{NAME}: being deleted: not collected"]


def test_a_pod_torn_down_before_its_container_could_be_described(tmp_path):
    pod = _pod(deleting=True)
    pod.status.container_statuses[0].container_id = None
    with pytest.raises(CollectError, match=f"target pod {NAME} is being deleted .*not running"):
        kcollect.collect_pod(FakeCore(pod), CollectConfig(namespace="default", pod=NAME, out=tmp_path), NAME, print)
