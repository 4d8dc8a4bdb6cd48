"""Collect run bundles from pods in a real cluster (the `kubernetes` client is an extra).

For each target pod: find its node, UID, QoS class, container ID, CPU limit and GOMAXPROCS;
exec gmp-sampler in the sampler DaemonSet pod on that node and stream its CSV into the
bundle as it arrives (and the node's /proc/stat rows, which the sampler sends as JSON lines
on stderr, into host_stat.csv); port-forward to the pod's pprof port and stream
/debug/pprof/trace?seconds=N into trace.out over the same window. Nothing collected is
lost: rows and trace bytes are appended and flushed as they come, meta.json says whether the
collection finished. No shell is ever involved: every command is an argv list.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..bundle import HOST_STAT_COLUMNS, to_meta
from ..errors import CollectError
from ..schema import new_meta
from .paths import container_cgroup_candidates, pod_cgroup_candidates

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
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
    out: Path = Path("runs")  # one bundle directory per pod is created inside
    kubeconfig: str | None = None  # explicit file; None: the standard lookup (KUBECONFIG, ~/.kube/config)
    context: str | None = None  # kubeconfig context
    sampler_namespace: str = "gmp-system"  # where the sampler DaemonSet runs
    sampler_selector: str = "app.kubernetes.io/name=gmp-sampler"
    interval_us: int = 997  # sampling interval


def _client(cfg: CollectConfig) -> Any:
    try:
        from kubernetes import client, config
    except ImportError:
        raise CollectError(
            "the Kubernetes collector needs the kubernetes client: pip install 'gmpanalysis[kube]'"
        ) from None
    if cfg.kubeconfig:
        if not Path(cfg.kubeconfig).is_file():
            raise CollectError(f"{cfg.kubeconfig}: kubeconfig not found")
        config.load_kube_config(config_file=cfg.kubeconfig, context=cfg.context)
    else:
        config.load_kube_config(context=cfg.context)
    return client.CoreV1Api()


def _forbidden(e: Any, verb: str, resource: str, namespace: str) -> CollectError:
    reason = ""
    text = str(e.body or e)
    m = re.search(r'"message":"((?:[^"\\]|\\.)*)"', text)
    if m:
        reason = m.group(1).replace('\\"', '"')
    else:
        try:
            reason = json.loads(e.body).get("message", "")
        except (ValueError, TypeError, AttributeError):
            reason = text[:200]
    return CollectError(
        f"forbidden: cannot {verb} {resource} in namespace {namespace!r} ({reason}); "
        "grant it with collectors/deploy/rbac.yaml"
    )


def _call(fn: Callable[..., Any], verb: str, resource: str, namespace: str, *a: Any, **kw: Any) -> Any:
    from kubernetes.client.rest import ApiException

    try:
        return fn(*a, **kw)
    except ApiException as e:
        # a refused websocket upgrade (exec, port-forward) comes back as status 0 with the
        # apiserver's 403 answer in the text
        if e.status == 403 or ('"code":403' in str(e) and "Forbidden" in str(e)):
            raise _forbidden(e, verb, resource, namespace) from None
        if e.status == 404:
            raise CollectError(f"{resource} not found in namespace {namespace!r}: {e.reason}") from None
        raise CollectError(f"{verb} {resource} in {namespace!r} failed: {e.status} {e.reason}") from None


def validate(cfg: CollectConfig) -> None:
    for what, v in (
        ("namespace", cfg.namespace),
        ("pod", cfg.pod),
        ("container", cfg.container),
        ("sampler namespace", cfg.sampler_namespace),
    ):
        if v is not None and not _NAME.match(v):
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


def _cpu_milli(q: str | None) -> int | None:
    if not q:
        return None
    q = str(q)
    return int(q[:-1]) if q.endswith("m") else int(round(float(q) * 1000))


def describe(pod: Any, container: str | None) -> dict[str, Any]:
    """The facts a bundle records about a target pod and container."""
    spec_c = next((c for c in pod.spec.containers if container in (None, c.name)), None)
    if spec_c is None:
        raise CollectError(f"pod {pod.metadata.name} has no container {container!r}")
    st = next((s for s in (pod.status.container_statuses or []) if s.name == spec_c.name), None)
    if st is None or not st.container_id:
        raise CollectError(f"container {spec_c.name} of pod {pod.metadata.name} is not running yet")
    limits = (spec_c.resources.limits or {}) if spec_c.resources else {}
    milli = _cpu_milli(limits.get("cpu"))
    gmp_env: str | None = None
    for e in spec_c.env or []:
        if e.name != "GOMAXPROCS":
            continue
        if e.value is not None:
            gmp_env = e.value
        elif e.value_from is not None and e.value_from.resource_field_ref is not None:
            # the downward API rounds limits.cpu up to whole CPUs, frozen at container start
            ref = e.value_from.resource_field_ref
            if ref.resource == "limits.cpu" and milli is not None:
                gmp_env = str(max(1, math.ceil(milli / 1000)))
            else:
                gmp_env = f"resourceFieldRef:{ref.resource}"
    return {
        "namespace": pod.metadata.namespace,
        "pod": pod.metadata.name,
        "container": spec_c.name,
        "node": pod.spec.node_name,
        "pod_uid": pod.metadata.uid,
        "container_id": st.container_id,
        "restart_count": st.restart_count,
        "qos": pod.status.qos_class,
        "cpu_limit": limits.get("cpu"),
        "quota_us": None if milli is None else max(1000, milli * 100),
        "gomaxprocs_env": gmp_env,
    }


def _sampler_pod(core: Any, cfg: CollectConfig, node: str) -> str:
    pods = _call(
        core.list_namespaced_pod,
        "list",
        "pods",
        cfg.sampler_namespace,
        cfg.sampler_namespace,
        label_selector=cfg.sampler_selector,
        field_selector=f"spec.nodeName={node}",
    )
    running = [p.metadata.name for p in pods.items if p.status.phase == "Running"]
    if not running:
        raise CollectError(
            f"no running sampler pod on node {node} (namespace {cfg.sampler_namespace}, selector "
            f"{cfg.sampler_selector}): apply collectors/deploy/sampler.yaml"
        )
    return running[0]


class _SamplerStderr:
    """The sampler's stderr, line by line. Go and Python exchange facts as JSON: a line that
    is a JSON object is a fact (``{"host_stat": {...}}`` a /proc/stat row, appended to
    host_stat.csv at once; ``{"start": {...}}`` what it samples, the policy it got and its
    first deadline, sent before the first read; ``{"summary": {...}}`` its closing summary);
    any other line is prose for the human log."""

    def __init__(self, host_csv: Path, log: Callable[[str], None]) -> None:
        self.host_csv = host_csv
        self.log = log
        self.pending = ""
        self.prose: list[str] = []
        self.start: dict[str, Any] | None = None
        self.summary: dict[str, Any] | None = None

    def feed(self, text: str) -> None:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self._line(line)

    def close(self) -> None:
        if self.pending:
            self._line(self.pending)  # a cut JSON line fails to parse and is logged as prose
            self.pending = ""

    def _line(self, line: str) -> None:
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and isinstance(obj.get("host_stat"), dict):
                self._host_row(obj["host_stat"])
                return
            if isinstance(obj, dict) and isinstance(obj.get("summary"), dict):
                self.summary = obj["summary"]
                return
            if isinstance(obj, dict) and isinstance(obj.get("start"), dict):
                self.start = obj["start"]
                return
        self.prose.append(line)
        self.log(line)

    def _host_row(self, row: dict[str, Any]) -> None:
        new = not self.host_csv.exists() or self.host_csv.stat().st_size == 0
        with open(self.host_csv, "a") as f:
            if new:
                f.write(",".join(HOST_STAT_COLUMNS) + "\n")
            f.write(",".join(str(int(row[c])) for c in HOST_STAT_COLUMNS) + "\n")


def _stream_sampler(
    core: Any,
    cfg: CollectConfig,
    sampler: str,
    candidates: list[str],
    seconds: float,
    csv: Path,
    log: Callable[[str], None],
) -> tuple[int | None, str, dict[str, Any] | None]:
    """Exec the sampler and append its CSV rows to ``csv`` as they arrive, and its host rows
    to host_stat.csv beside it. Returns (exit code, stderr prose, the sampler's summary; or
    its start facts flagged ``summary_missing`` when it died without one; or None)."""
    from kubernetes.stream import stream

    argv = [
        "/gmp-sampler",
        "--root",
        SAMPLER_ROOT,
        "--cgroup",
        "|".join(candidates),
        "--interval",
        f"{cfg.interval_us}us",
        "--duration",
        f"{seconds:.3f}s",
        "--fifo",
        "--out",
        "-",
        "--host-stat",
        "stderr",
        "--summary",
        "stderr",
    ]
    resp = _call(
        stream,
        "create",
        "pods/exec",
        cfg.sampler_namespace,
        core.connect_get_namespaced_pod_exec,
        sampler,
        cfg.sampler_namespace,
        command=argv,
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    skip_header = csv.exists() and csv.stat().st_size > 0
    err = _SamplerStderr(csv.with_name("host_stat.csv"), log)
    pending = ""
    with open(csv, "a") as f:
        while True:
            resp.update(timeout=1)
            if resp.peek_stdout():
                pending += resp.read_stdout()
                cut = pending.rfind("\n")
                if cut >= 0:
                    block, pending = pending[: cut + 1], pending[cut + 1 :]
                    if skip_header and block.startswith("t_ns,"):
                        block = block.split("\n", 1)[1]
                        skip_header = False
                    f.write(block)
                    f.flush()
            if resp.peek_stderr():
                err.feed(resp.read_stderr())
            if not resp.is_open():
                break
        if pending:
            f.write(pending)  # a partial last line: readers drop it and say so
    err.close()
    facts = err.summary
    if facts is None and err.start is not None:
        facts = {**err.start, "summary_missing": True}
    return resp.returncode, "\n".join(err.prose), facts


def _fetch_trace(core: Any, cfg: CollectConfig, pod: str, seconds: float, dest: Path, res: dict[str, Any]) -> None:
    """Port-forward to the pprof port and stream the trace body (HTTP/1.1, chunked) to dest."""
    from kubernetes.stream import portforward

    res["mono_request_ns"] = time.monotonic_ns()
    end = time.monotonic() + seconds
    try:
        # a just-started process may not listen yet: the forwarded connection then closes at
        # once; retry for a few seconds, asking for the rest of the window each time
        for attempt in range(8):
            pf = _call(
                portforward,
                "create",
                "pods/portforward",
                cfg.namespace,
                core.connect_get_namespaced_pod_portforward,
                pod,
                cfg.namespace,
                ports=str(cfg.pprof_port),
            )
            sock = pf.socket(cfg.pprof_port)
            window = max(1.0, end - time.monotonic())
            sock.settimeout(window + 30)
            req = (
                f"GET /debug/pprof/trace?seconds={window:.0f} HTTP/1.1\r\nHost: localhost\r\n"
                "Connection: close\r\nAccept-Encoding: identity\r\n\r\n"
            )
            sock.sendall(req.encode())
            reader = sock.makefile("rb")
            status = reader.readline().decode("latin-1").strip()
            if status or attempt == 7:
                break
            pf.close()
            time.sleep(0.5)
        res["http_status_line"] = status
        res["attempts"] = attempt + 1
        if not status.startswith("HTTP/1.") or " 200" not in status:
            raise CollectError(
                f"pprof answered {status!r} on port {cfg.pprof_port} (is it a Go service with "
                "net/http/pprof listening there?)"
            )
        headers = {}
        while True:
            line = reader.readline().decode("latin-1").strip()
            if not line:
                break
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        chunked = "chunked" in headers.get("transfer-encoding", "")
        with open(dest, "wb") as out:
            while True:
                if chunked:
                    size_line = reader.readline()
                    if not size_line:
                        raise CollectError("connection closed inside a chunked body")
                    size = int(size_line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        break
                    data = reader.read(size)
                    reader.readline()  # CRLF after the chunk
                    if len(data) < size:
                        out.write(data)
                        raise CollectError("connection closed inside a chunk")
                else:
                    data = reader.read1(1 << 16)
                    if not data:
                        break
                out.write(data)
                out.flush()
        res["complete"] = True
        err = pf.error(cfg.pprof_port)
        if err:
            res["port_forward_error"] = err
    except Exception as e:  # noqa: BLE001 - a worker thread: every failure is recorded, none escapes
        res["complete"] = False
        res["error"] = f"port {cfg.pprof_port}: {type(e).__name__}: {e}"
    res["mono_done_ns"] = time.monotonic_ns()
    res["bytes"] = dest.stat().st_size if dest.exists() else 0


def collect_pod(core: Any, cfg: CollectConfig, pod_name: str, log: Callable[[str], None] = print) -> Path:
    """Collect one pod's bundle; returns its directory. Raises CollectError when the target
    pod disappears (after writing what was collected)."""
    pod = _call(core.read_namespaced_pod, "get", "pods", cfg.namespace, pod_name, cfg.namespace)
    info = describe(pod, cfg.container)
    sampler = _sampler_pod(core, cfg, info["node"])
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(cfg.out) / f"{info['namespace']}-{info['pod']}-{info['container']}-{stamp}"
    out.mkdir(parents=True, exist_ok=False)
    csv = out / "cpu_stat.csv"
    meta: dict[str, Any] = {
        **info,
        "period_us": 100_000,
        "burst_us": 0,
        "cgroup_version": None,
        "cgroup_paths": [],
        "pod_cgroup_candidates": pod_cgroup_candidates(info["pod_uid"], info["qos"]),
        "sampler": {"pod": sampler, "namespace": cfg.sampler_namespace, "interval_ns": cfg.interval_us * 1000},
        "mono_start_ns": None,
        "mono_end_ns": None,
        "wall_start": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "restarts": [],
    }
    meta = new_meta("kube", out.name, **meta)
    to_meta(out / "meta.json", meta)
    log(
        f"{info['pod']}: node {info['node']}, {info['qos']}, limit {info['cpu_limit']}, GOMAXPROCS env "
        f"{info['gomaxprocs_env']}, sampler {sampler}"
    )

    trace_res: dict[str, Any] = {}
    th = None
    if cfg.pprof_port is not None:
        th = threading.Thread(
            target=_fetch_trace,
            args=(core, cfg, info["pod"], cfg.duration_s, out / "trace.out", trace_res),
            daemon=True,
        )
        th.start()
    deadline = time.monotonic() + cfg.duration_s
    gone = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0.05:
            break
        cands = container_cgroup_candidates(info["pod_uid"], info["qos"], info["container_id"])
        rc, stderr, summary = _stream_sampler(core, cfg, sampler, cands, left, csv, log)
        if summary is not None:
            _record_summary(meta, summary)
        if meta["mono_start_ns"] is None and csv.exists():
            meta["mono_start_ns"] = _first_t(csv)
        if rc == 0 or deadline - time.monotonic() <= 0.05:
            break
        stop = str((summary or {}).get("stop_reason", ""))
        # the sampler exits 3 when a cgroup it reads disappears (its JSON summary says so too)
        if not stop.startswith("cgroup gone") and rc != 3:
            gone = f"sampler stopped (exit {rc}): {stderr.strip()[-300:]}"
            break
        # the container's cgroup went away: a restart (the kubelet starts a new container with
        # a new ID, and cgroup) or a deletion; wait for the one or report the other
        gone, new_id = _wait_for_container(core, cfg, info, deadline)
        if gone or new_id is None:
            if new_id is None and not gone:
                meta["notes"] = ["the container exited and did not come back within the window"]
            break
        log(
            f"{info['pod']}: container restarted ({info['container_id']} -> {new_id}); "
            "sampling the new one (its counters restart: a new segment)"
        )
        meta["restarts"].append({"mono_ns": time.monotonic_ns(), "old": info["container_id"], "new": new_id})
        info["container_id"] = new_id
        to_meta(out / "meta.json", meta)
    if th is not None:
        th.join(timeout=(cfg.duration_s + 60) if gone is None else 5)
        meta["trace"] = dict(trace_res)
        if not trace_res.get("complete"):
            log(f"{info['pod']}: trace incomplete or absent: {trace_res.get('error', 'still running')}")
    meta["mono_end_ns"] = _last_t(csv) if csv.exists() else None
    meta["complete"] = gone is None
    if gone:
        meta["error"] = gone
    to_meta(out / "meta.json", meta)
    if gone:
        raise CollectError(f"{gone}; the samples collected so far are in {out}")
    return out


def _record_summary(meta: dict[str, Any], summary: dict[str, Any]) -> None:
    """Put one sampler exec's JSON summary into meta: the cgroup it sampled, the scheduling
    policy it got (not the one asked for: inside a pod SCHED_FIFO is refused and the
    summary says why), its first deadline and its lateness. Every exec's summary (one more
    per container restart) is kept in ``sampler.execs``; the top-level fields are the first's."""
    for c in summary.get("cgroups") or []:
        meta["cgroup_version"] = c.get("version", meta["cgroup_version"])
        if c.get("path") and c["path"] not in meta["cgroup_paths"]:
            meta["cgroup_paths"].append(c["path"])
    s = meta["sampler"]
    execs = s.setdefault("execs", [])
    execs.append({k: v for k, v in summary.items() if k != "cgroups"})
    if len(execs) == 1:
        for k, v in execs[0].items():
            s.setdefault(k, v)
    if summary.get("policy_error"):
        s["policy_error"] = summary["policy_error"]


def _wait_for_container(
    core: Any, cfg: CollectConfig, info: dict[str, Any], deadline: float
) -> tuple[str | None, str | None]:
    """After the container's cgroup vanished: (reason the pod is gone, None), or (None, the
    new container ID), or (None, None) when the window ended first."""
    from kubernetes.client.rest import ApiException

    while time.monotonic() < deadline:
        try:
            pod = core.read_namespaced_pod(info["pod"], cfg.namespace)
        except ApiException as e:
            return f"target pod {info['pod']} disappeared mid-collection ({e.status} {e.reason})", None
        if pod.metadata.deletion_timestamp is not None:
            return f"target pod {info['pod']} is being deleted (since {pod.metadata.deletion_timestamp})", None
        try:
            new = describe(pod, info["container"])
        except CollectError:
            new = None
        if new is not None and new["container_id"] != info["container_id"]:
            return None, new["container_id"]
        time.sleep(0.5)
    return None, None


def _first_t(csv: Path) -> int | None:
    with open(csv) as f:
        f.readline()
        row = f.readline()
    return int(row.split(",", 1)[0]) if row.strip() else None


def _last_t(csv: Path) -> int | None:
    with open(csv, "rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - 4096))
        lines = [ln for ln in f.read().split(b"\n") if ln and not ln.startswith(b"t_ns")]
    for ln in reversed(lines):
        try:
            return int(ln.split(b",", 1)[0])
        except ValueError:
            continue
    return None


def collect(cfg: CollectConfig, log: Callable[[str], None] = print) -> list[Path]:
    """Collect every target pod (in parallel); returns the bundle directories."""
    validate(cfg)
    core = _client(cfg)
    if cfg.pod:
        names = [cfg.pod]
    else:
        pods = _call(
            core.list_namespaced_pod, "list", "pods", cfg.namespace, cfg.namespace, label_selector=cfg.selector
        )
        names = [p.metadata.name for p in pods.items if p.status.phase == "Running"]
        if not names:
            raise CollectError(f"no running pod matches {cfg.selector!r} in namespace {cfg.namespace!r}")
    results: dict[str, Path | Exception] = {}

    def one(name: str) -> None:
        try:
            results[name] = collect_pod(core, cfg, name, log)
        except Exception as e:  # noqa: BLE001 - reported per pod below
            results[name] = e

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [f"{n}: {r}" for n, r in results.items() if isinstance(r, Exception)]
    if errors:
        raise CollectError("; ".join(errors))
    return [r for r in results.values() if isinstance(r, Path)]
