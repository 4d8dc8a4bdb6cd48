from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from gmpanalysis.cgroup import detect_version

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
RUNS = sorted(p for p in (FIXTURES / "runs").iterdir() if (p / "meta.json").exists())
DATA = Path(__file__).parent / "data"
# The attack suites (tests/test_attack_*.py) and the property tests run a seeded sample that
# reaches every kind of mutation in the fast suite; GMP_FULL_ATTACK=1 runs their full counts
# (benchmarks/attack_*.py and fuzz_trace.py run many more).
FULL_ATTACK = os.environ.get("GMP_FULL_ATTACK", "") not in ("", "0")


def lab_unavailable_reason() -> str | None:
    """Why real-cgroup tests cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root to create cgroups with CPU quotas"
    if detect_version("/sys/fs/cgroup") is None:
        return "no cgroup cpu controller under /sys/fs/cgroup (neither v1 cpu/ nor v2 with cpu)"
    if detect_version("/sys/fs/cgroup") == 2:
        ctl = Path("/sys/fs/cgroup/cgroup.subtree_control")
        if "cpu" not in ctl.read_text().split() and not os.access(ctl, os.W_OK):
            return "cgroup v2 without a writable root subtree_control: cpu cannot be delegated here"
    return _go_missing()


def _go_missing() -> str | None:
    from gmpanalysis.lab.binaries import find_go

    if find_go() is None and not os.environ.get("GMP_BIN_DIR"):
        return "needs the Go toolchain to build the collectors (or GMP_BIN_DIR)"
    return None


# One marker says both things: the test starts real systems (deselect with -m "not lab"), and
# it skips, saying why, only where those systems cannot exist (see pytest_collection_modifyitems).


def vm_unavailable_reason() -> str | None:
    """Why the VM lab cannot run here, or None if it can. Where this is root with apt,
    scripts/test.sh installs qemu and busybox-static and fetches the kernels: there the vm
    tests run, and fail with the lab's own message if a step is missing."""
    from gmpanalysis.lab.kernels import BUSYBOX, cache_dir
    from gmpanalysis.lab.vm import QEMU

    can_install = os.geteuid() == 0 and shutil.which("apt-get") is not None
    if not can_install:
        if shutil.which(QEMU) is None or not Path(BUSYBOX).is_file():
            return f"{QEMU} or {BUSYBOX} is missing, and without root and apt they cannot be installed"
        if shutil.which("apt-get") is None and not any(cache_dir().glob("*/.complete")):
            return "the kernels come from Debian's packages: no apt-get and none cached"
    return _go_missing()


def pytest_collection_modifyitems(config, items):
    # a vm test is also a lab test (deselected with "not lab"); it needs qemu, not this
    # machine's cgroups
    reasons = {"lab": lab_unavailable_reason(), "vm": None}
    if any(item.get_closest_marker("vm") is not None for item in items):
        reasons["vm"] = vm_unavailable_reason()
    for item in items:
        kind = "vm" if item.get_closest_marker("vm") is not None else "lab"
        if item.get_closest_marker(kind) is not None and reasons[kind] is not None:
            item.add_marker(pytest.mark.skip(reason=f"{kind}: {reasons[kind]}"))


SERIAL_MARKERS = ("lab", "kube", "vm")


def pytest_configure(config):
    """With pytest-xdist's -n, each test file runs whole on one worker (its module fixtures
    built once): --dist loadfile where -n left the default. Set here, not in addopts, so
    pytest runs without xdist installed too."""
    if getattr(config.option, "dist", "no") == "load" and getattr(config.option, "numprocesses", None):
        config.option.dist = "loadfile"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Lab, kube and vm tests measure real timings: under pytest-xdist with more than one
    worker (``-n``), where other tests run beside them, each fails before any of its
    fixtures starts anything (the fast suite, ``-m "not lab and not kube"``, runs in parallel)."""
    workers = getattr(item.config, "workerinput", {}).get("workercount", 1)
    if workers > 1 and any(item.get_closest_marker(m) for m in SERIAL_MARKERS):
        pytest.fail(
            f"a lab/kube/vm test measures real timings and must not share the machine with {workers} parallel "
            'workers: run it without -n (the fast suite, -m "not lab and not kube", may use -n)',
            pytrace=False,
        )


@pytest.fixture(scope="session")
def example_report(tmp_path_factory) -> Path:
    """The report of the example runs as ``gmpanalysis report`` writes it, made once for the
    tests that only read it (tests/test_report.py, tests/test_report_layout.py)."""
    from gmpanalysis.cli import main

    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def bins() -> dict[str, Path]:
    from gmpanalysis.lab import ensure_binaries

    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists() and not os.environ.get("GMP_BIN_DIR"):
        pytest.skip("the Go toolchain is needed to build the collectors")
    return ensure_binaries()


@pytest.fixture(scope="session")
def cluster(bins, tmp_path_factory):
    """A real one-node Kubernetes (gmpanalysis.kube.local) for the kube tests: started once
    per session, torn down at its end whatever happens. A test that adds workloads removes
    them again (the next module's tests expect the demo pod alone)."""
    pytest.importorskip("kubernetes", reason="the [kube] extra is not installed")
    from gmpanalysis.kube import local

    local.build()
    base = tmp_path_factory.mktemp("k8s")
    try:
        yield local.start(base, bins)
    finally:
        local.stop(base)


@pytest.fixture
def busy_cgroup():
    """A real lab cgroup at 0.5 CPU with two busy threads inside it (they exhaust the
    quota every period). Yields (LabCgroup, busy process)."""
    from gmpanalysis.lab import LabCgroup

    cg = LabCgroup(f"gmp-lab-test-{os.getpid()}-{os.urandom(3).hex()}")
    cg.create(quota_us=50_000, period_us=100_000)
    # two spinning shells: more runnable threads than the quota, on both CPUs
    busy = subprocess.Popen(
        ["sh", "-c", "(while :; do :; done) & while :; do :; done"],
        preexec_fn=cg.join_in_child,
        start_new_session=True,
    )
    try:
        yield cg, busy
    finally:
        # the shell's background child is in the same new session: end the group we made
        os.killpg(busy.pid, 9)
        busy.wait()
        cg.remove()


def remove_agent(api, deployments=(), prefixes=("gmp-agent",)) -> None:
    """Remove what a kube test installed for the node agent (its DaemonSet, ServiceAccount
    and RBAC) and the test's own Deployments (name, namespace), then wait up to 120 s for
    the pods whose names start with ``prefixes`` to go: the next tests expect the demo pod
    alone (and the agent's port free)."""
    import time

    from kubernetes import client

    apps, core, rbac = client.AppsV1Api(api), client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    for delete, args in (
        *((apps.delete_namespaced_deployment, d) for d in deployments),
        (apps.delete_namespaced_daemon_set, ("gmp-agent", "gmp-system")),
        (core.delete_namespaced_service_account, ("gmp-agent", "gmp-system")),
        (rbac.delete_cluster_role, ("gmp-agent",)),
        (rbac.delete_cluster_role_binding, ("gmp-agent",)),
    ):
        try:
            delete(*args)
        except client.ApiException as e:
            if e.status != 404:
                raise
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(
        p.metadata.name.startswith(tuple(prefixes)) for p in core.list_pod_for_all_namespaces().items
    ):
        time.sleep(1)


def stop_procs(procs) -> None:
    """End started processes, the last first (workers before their scheduler: a worker told
    to close by a closing scheduler and by SIGTERM at once hangs in its close), each to its
    end, killed after 20 s."""
    import signal
    import subprocess

    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def go_tool(name: str, override: str) -> str:
    """The path of the tool ``scripts/NAME.sh`` builds once from the Go module proxy (helm,
    krew, prometheus; ``OVERRIDE=/path`` names one instead): the test skips only where
    there is neither Go nor that variable, and fails with the script's error where the
    build fails."""
    from gmpanalysis.lab.binaries import find_go

    if not os.environ.get(override) and find_go() is None:
        pytest.skip(f"{name} is built from the Go module proxy: needs the Go toolchain (or {override}=/path/to/{name})")
    r = subprocess.run(["bash", str(REPO / "scripts" / f"{name}.sh")], capture_output=True, text=True, timeout=1500)
    if r.returncode != 0:
        pytest.fail(f"scripts/{name}.sh could not provide {name} (exit {r.returncode}):\n{r.stderr[-4000:]}")
    return r.stdout.strip().splitlines()[-1]


# the agent's /metrics port in the shipped manifests and the chart's values
METRICS_PORT = 9477


def agent_pod(core):  # noqa: ANN001, ANN201
    """The node agent's pod where it runs (None otherwise)."""
    pods = core.list_namespaced_pod("gmp-system", label_selector="app.kubernetes.io/name=gmp-agent").items
    return pods[0] if pods and pods[0].status.phase == "Running" else None


def scrape(core) -> tuple[str, str]:  # noqa: ANN001
    """(exposition text, route): through the API server's pod proxy; where the proxy is
    refused, straight from the node's port (host network), and the route says so."""
    from kubernetes import client

    pod = agent_pod(core)
    assert pod is not None, "the agent pod is not running"
    try:
        text = core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod.metadata.name}:{METRICS_PORT}", "gmp-system", "metrics"
        )
        return text, "pod proxy"
    except client.ApiException as e:
        with urllib.request.urlopen(f"http://{pod.status.pod_ip}:{METRICS_PORT}/metrics", timeout=10) as resp:
            return resp.read().decode(), f"node port (pod proxy refused: {e.status} {e.reason})"
