"""Which pods to collect from, and how: one `gmpanalysis collect` invocation."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..errors import CollectError

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


_SELECTOR = re.compile(r"^[A-Za-z0-9_./=!,()\- ]{1,1024}$")


SAMPLER_ROOT = "/host/sys/fs/cgroup"


@dataclasses.dataclass
class CollectConfig:
    """One `gmpanalysis collect` invocation."""

    namespace: str  # the targets' namespace
    pod: str | None = None  # one pod by name ...
    selector: str | None = None  # ... or every pod matching a label selector
    container: str | None = None  # container name (default: the pod's first)
    duration_s: float = 30.0  # sampling and trace window
    pprof_port: int | None = 6060  # the target's net/http/pprof port (None: no trace)
    pprof_host: str | None = None  # Host header of the trace request (default 127.0.0.1:PORT)
    pprof_path: str = "/debug/pprof/trace"  # where the server mounts net/http/pprof's trace
    out: Path = Path("runs")  # one bundle directory per pod is created inside
    kubeconfig: str | None = None  # explicit file; None: the standard lookup (KUBECONFIG, ~/.kube/config)
    context: str | None = None  # kubeconfig context
    sampler_namespace: str = "gmp-system"  # where the sampler DaemonSet runs
    sampler_selector: str = "app.kubernetes.io/name=gmp-sampler"
    interval_us: int = 997  # sampling interval


def validate(cfg: CollectConfig) -> None:
    for what, v in (
        ("namespace", cfg.namespace),
        ("pod", cfg.pod),
        ("container", cfg.container),
        ("sampler namespace", cfg.sampler_namespace),
    ):
        if v is not None and not DNS_SUBDOMAIN.match(v):
            raise CollectError(f"{what} {v!r} is not a valid Kubernetes name")
    if (cfg.pod is None) == (cfg.selector is None):
        raise CollectError("give exactly one of --pod and -l/--selector")
    for sel in (cfg.selector, cfg.sampler_selector):
        if sel is not None and not _SELECTOR.match(sel):
            raise CollectError(f"label selector {sel!r} has characters a selector cannot have")
    if not 0 < cfg.duration_s <= 3600:
        raise CollectError("--duration must be in (0, 3600] seconds")
    if cfg.pprof_port is not None and not 1 <= cfg.pprof_port <= 65535:
        raise CollectError(f"--pprof-port {cfg.pprof_port} is not a port")
    if not cfg.pprof_path.startswith("/") or any(c.isspace() for c in cfg.pprof_path):
        raise CollectError(
            f"--pprof-path {cfg.pprof_path!r}: an absolute URL path without spaces, e.g. /debug/pprof/trace"
        )
    if cfg.pprof_host is not None and (not cfg.pprof_host or any(c.isspace() for c in cfg.pprof_host)):
        raise CollectError(f"--pprof-host {cfg.pprof_host!r}: a host or host:port without spaces")
