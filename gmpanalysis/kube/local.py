"""A real one-node Kubernetes cluster on this machine, with the collectors' images and the
demo workload: what the end-to-end tests and the in-pod measurements run against.

The node is prepared, started and stopped by the project's cluster scripts in
``scripts/cluster`` (prepare.sh: Debian packages and Kubernetes v1.34.4 built once into
``K8S_BIN``; up.sh; down.sh; mkimage.py); this module drives them, imports the sampler and
demo images into the node's containerd, applies the manifests of ``collectors/deploy`` and
waits until the demo pod is ready. Needs root and the cgroup v1 cpu controller (the v1.34
kubelet is the last that runs on cgroup v1, which the CFS experiments here use).
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import LabError
from ..lab.cgroups import V1_SHARES_MAX

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts" / "cluster"
# the built Kubernetes binaries (scripts/cluster/build-k8s.sh keeps them there)
K8S_BIN = Path(os.environ.get("K8S_BIN", Path.home() / ".cache" / "gmp-k8s" / "v1.34.4"))
# set by scripts/test.sh when its prepare step failed: the log of that attempt
PREPARE_FAILED_ENV = "GMP_KUBE_PREPARE_FAILED"
DEPLOY = REPO / "collectors" / "deploy"
# each as localhost/<name>:dev: the manifests' images, the demo app built with automaxprocs and
# the spinner (threads that log their own gaps: a record of freezes independent of cpu.stat)
IMAGES = ("gmp-sampler", "gmp-demoapp", "gmp-demoapp-automaxprocs", "gmp-spinner")
# other binaries an image holds beside its own (the agent runs the sampler for its captures)
IMAGE_EXTRAS = {"gmp-sampler": ("gmp-agent",)}


def unavailable_reason() -> str | None:
    """Why a local cluster cannot start here, or None."""
    if os.geteuid() != 0:
        return "a local Kubernetes node needs root (kubelet, containerd, cgroups)"
    if not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists():
        return "the local node runs the kubelet on cgroup v1 only (no /sys/fs/cgroup/cpu/cpu.cfs_quota_us)"
    return None


def _run_script(argv: list[str], what: str, timeout: float, env: dict[str, str] | None = None) -> None:
    """Run a cluster script, passing its progress lines (stderr) on as they come; on failure
    or after ``timeout`` s raise a LabError that quotes its last lines."""
    tail: collections.deque[str] = collections.deque(maxlen=25)
    with subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, errors="replace"
    ) as p:
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            assert p.stderr is not None
            for line in p.stderr:
                sys.stderr.write(line)
                tail.append(line.rstrip("\n"))
            rc = p.wait()
        finally:
            timer.cancel()
    if rc != 0:
        why = f"killed after {timeout:.0f} s" if rc == -9 else f"exit {rc}"
        raise LabError(f"{what} failed ({why}); its last lines:\n" + "\n".join(tail))


def build() -> None:
    """Prepare this machine once: install the Debian packages the node needs and build
    Kubernetes into K8S_BIN (scripts/cluster/prepare.sh; ~10 min cold on 2 cores, a few
    seconds of checks afterwards). When scripts/test.sh already tried and failed, raise its
    error at once instead of trying again."""
    failed = os.environ.get(PREPARE_FAILED_ENV)
    if failed:
        try:
            log = Path(failed).read_text(errors="replace").splitlines()[-25:]
        except OSError:
            log = []
        raise LabError(
            f"scripts/cluster/prepare.sh failed before the tests (scripts/test.sh, log {failed}); "
            "fix it and run it again:\n" + "\n".join(log)
        )
    env = {**os.environ, "K8S_BIN": str(K8S_BIN)}
    _run_script(["bash", str(CLUSTER / "prepare.sh")], "scripts/cluster/prepare.sh", 3600, env)


def wait_running(core: Any, timeout: float = 120) -> Any:
    """Wait until every live pod runs and the demo pod's containers are ready; returns it."""
    deadline = time.monotonic() + timeout
    pods: list[Any] = []
    while time.monotonic() < deadline:
        pods = [p for p in core.list_pod_for_all_namespaces().items if p.metadata.deletion_timestamp is None]
        demo = [p for p in pods if p.metadata.labels.get("app") == "gmp-demoapp"]
        if (
            demo
            and all(p.status.phase == "Running" for p in pods)
            and all(cs.ready for p in demo for cs in (p.status.container_statuses or []))
        ):
            return demo[0]
        time.sleep(0.5)
    raise LabError(
        f"local cluster: pods not running after {timeout:.0f} s: "
        f"{[(p.metadata.name, p.status.phase) for p in pods]}; see `kubectl describe pod` for the stuck ones"
    )


def image_labels(prog: str) -> dict[str, str]:
    """The OCI labels of a collector image: what it is, the version it was built at and
    where its source lives (the collectors' Go module)."""
    from .. import __version__

    module = next(
        (ln.split()[1] for ln in (REPO / "collectors" / "go.mod").read_text().splitlines() if ln.startswith("module ")),
        "",
    )
    repo = "/".join(module.split("/")[:3])
    return {
        "org.opencontainers.image.title": prog,
        "org.opencontainers.image.version": __version__,
        "org.opencontainers.image.source": f"https://{repo}" if repo else "",
        "org.opencontainers.image.licenses": "Apache-2.0",
    }


def start(base: Path, bins: dict[str, Path]) -> dict[str, Any]:
    """Start the node under ``base``, import the images built from ``bins``, apply the
    sampler DaemonSet, RBAC and demo manifests, and wait for the demo pod. Returns
    ``kubeconfig``, ``core`` (CoreV1Api), ``api`` (ApiClient), ``sock`` (containerd) and
    ``base``. Call :func:`stop` with the same ``base`` whatever happens."""
    import kubernetes
    from kubernetes import utils

    env = {**os.environ, "PYTHON": sys.executable}
    _run_script(["bash", str(CLUSTER / "up.sh"), str(base), str(K8S_BIN)], "scripts/cluster/up.sh", 600, env)
    sock = base / "containerd" / "containerd.sock"
    for prog in IMAGES:
        tar = base / f"{prog}.tar"
        subprocess.run(
            [
                sys.executable,
                str(CLUSTER / "mkimage.py"),
                *(x for k, v in image_labels(prog).items() for x in ("--label", f"{k}={v}")),
                str(tar),
                f"localhost/{prog}:dev",
                f"/{prog}",
                f"{bins[prog]}:/{prog}",
                *(f"{bins[x]}:/{x}" for x in IMAGE_EXTRAS.get(prog, ())),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        subprocess.run(
            ["ctr", "-a", str(sock), "-n", "k8s.io", "images", "import", str(tar)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    kubeconfig = str(base / "admin.kubeconfig")
    kubernetes.config.load_kube_config(config_file=kubeconfig)
    api = kubernetes.client.ApiClient()
    for f in ("sampler.yaml", "rbac.yaml", "demo.yaml"):
        utils.create_from_yaml(api, str(DEPLOY / f), namespace="default")
    core = kubernetes.client.CoreV1Api(api)
    wait_running(core)
    return {"kubeconfig": kubeconfig, "core": core, "api": api, "sock": str(sock), "base": base}


def _sampler_cpu_cgroup(timeout: float) -> Path:
    """The cpu cgroup (v1) of the sampler DaemonSet's container: where its idle main process
    runs, and where every `gmp-sampler` exec'd into it starts."""
    deadline = time.monotonic() + timeout
    while True:
        for proc in Path("/proc").iterdir():
            try:
                if (proc / "cmdline").read_bytes() != b"/gmp-sampler\0--idle\0":
                    continue
                lines = (proc / "cgroup").read_text().splitlines()
            except OSError:
                continue  # gone meanwhile, or not a process directory
            for line in lines:
                _, controllers, path = line.split(":", 2)
                if "cpu" in controllers.split(","):
                    return Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
        if time.monotonic() > deadline:
            raise LabError(
                f"local cluster: no idle gmp-sampler process after {timeout:.0f} s (is the sampler DaemonSet running?)"
            )
        time.sleep(0.5)


def grant_sampler_rt_budget(runtime_us: int = 100_000, timeout: float = 60) -> list[Path]:
    """Give the sampler's container an RT budget, so that `gmp-sampler --fifo` exec'd into it
    gets SCHED_FIFO. With RT group scheduling (CONFIG_RT_GROUP_SCHED, as on this machine) a
    cgroup may run SCHED_FIFO tasks only for its cpu.rt_runtime_us per cpu.rt_period_us,
    which is 0 for every cgroup the kubelet makes; a node's administrator grants it along the
    path from the root, each level no more than its parent (here ``runtime_us`` per second,
    twice what 1 kHz sampling of two cgroups uses). Returns the cgroups changed, leaf last,
    for :func:`revoke_sampler_rt_budget`."""
    leaf = _sampler_cpu_cgroup(timeout)
    root = Path("/sys/fs/cgroup/cpu")
    chain = [root / Path(*leaf.relative_to(root).parts[: i + 1]) for i in range(len(leaf.relative_to(root).parts))]
    done: list[Path] = []
    try:
        for cg in chain:
            (cg / "cpu.rt_runtime_us").write_text(str(runtime_us))
            done.append(cg)
    except OSError as e:
        revoke_sampler_rt_budget(done)
        raise LabError(f"local cluster: cannot give {cg} an RT budget of {runtime_us} µs/s ({e})") from e
    return done


def revoke_sampler_rt_budget(changed: list[Path]) -> None:
    """Take the budget back, leaf first (a parent's budget cannot drop below its children's)."""
    for cg in reversed(changed):
        try:
            (cg / "cpu.rt_runtime_us").write_text("0")
        except FileNotFoundError:
            pass  # the cgroup went with its pod


@contextlib.contextmanager
def measurement_priority() -> Iterator[None]:
    """While inside: the sampler runs SCHED_FIFO (:func:`grant_sampler_rt_budget`) and the
    node's pods outweigh host processes (kubepods' cpu.shares at the kernel's maximum, as the
    lab gives its cgroups): a CPU hog on the host then neither delays the sampler's reads nor
    stops the pods' threads for tens of ms, stops a spinner would log as if frozen. The
    kubelet sets kubepods' weight from the node's allocatable CPU when it starts and does not
    rewrite it; the old value is put back on leaving."""
    shares = Path("/sys/fs/cgroup/cpu/kubepods/cpu.shares")
    old = shares.read_text().strip()
    budget = grant_sampler_rt_budget()
    try:
        shares.write_text(str(V1_SHARES_MAX))
        yield
    finally:
        shares.write_text(old)
        revoke_sampler_rt_budget(budget)


def start_load(bins: dict[str, Path], seconds: float, rate: float = 40, port: int = 18181) -> subprocess.Popen:
    """Open-loop load on a demo pod from the host, over loopback (collectors/deploy/demo.yaml
    runs it on the host network at 127.0.0.1:18181): 40 req/s of 20 ms is 0.8 CPU against
    its 0.5 CPU limit."""
    return subprocess.Popen(
        [
            str(bins["gmp-loadgen"]),
            "-url",
            f"http://127.0.0.1:{port}/work",
            "-rate",
            str(rate),
            "-duration",
            f"{seconds:.0f}s",
            "-out",
            "/dev/null",
        ],
        stderr=subprocess.DEVNULL,
    )


def stop(base: Path) -> None:
    """Tear the node down (processes, mounts, cgroups it made)."""
    subprocess.run(["bash", str(CLUSTER / "down.sh"), str(base)], timeout=300, stdout=subprocess.DEVNULL)
