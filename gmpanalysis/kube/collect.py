"""Collect run bundles from pods in a real cluster (the `kubernetes` client is an extra).

For each target pod: find its node, UID, QoS class, container ID, CPU limit and GOMAXPROCS;
exec gmp-sampler in the sampler DaemonSet pod on that node on both cgroup levels that can
freeze the process (the container's and the pod's: the kubelet gives the pod cgroup a quota
of its own, the sum of its containers' limits, on its own bandwidth timer) and stream its CSV
into the bundle as it arrives (and what the sampler sends as JSON lines on stderr: the node's
/proc/stat rows into host_stat.csv, every level's CFS limits, at the start and at each
change such as an in-place resize, into limits.csv); port-forward to the pod's pprof port
and stream /debug/pprof/trace?seconds=N into trace.out over the same window (the samples go on
until the trace's body has ended: an overloaded process begins its trace late). Nothing
collected is lost: rows and trace bytes are appended and flushed as they come, meta.json
says whether the collection finished. No shell is ever involved: every command is an argv
list.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..bundle import to_meta
from ..cgroup import sampler_error
from ..errors import CgroupFormatError, CollectError, GmpError
from ..goversion import facts_from_trace
from ..schema import new_meta
from .api import api_call, api_error, kube_client, unreachable
from .config import CollectConfig, validate
from .paths import bundle_dir, safe_component
from .sampler import (
    SamplerStderr,  # noqa: F401
    first_t,
    last_t,
    record_start,
    record_summary,
    stream_sampler,
)
from .target import describe, gone_reason, pod_gone, sampler_pod, wait_for_container
from .trace import fetch_trace

# how long past the window the samples wait for a trace still arriving
TRACE_LATE_S = 60.0
# how long the samples go on after the trace's body has ended: past the CFS boundaries that
# close the periods holding its last events (the node agent waits as long)
TRACE_TAIL_NS = 300_000_000


def _read_target(core: Any, cfg: CollectConfig, pod_name: str, listed: bool) -> Any:
    """The target pod as the API has it now. A pod that matched the selector a moment ago
    and is gone now was deleted in between: say so, not just "not found"."""
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return core.read_namespaced_pod(pod_name, cfg.namespace)
    except HTTPError as e:  # the first request: where an unreachable server shows
        raise unreachable(e, "get", "pods", cfg.namespace) from None
    except ApiException as e:
        if listed and e.status == 404:
            raise CollectError(
                f"target pod {pod_name} disappeared before its collection started ({e.status} {e.reason}); "
                f"it matched {cfg.selector!r} a moment before"
            ) from None
        raise api_error(e, "get", "pods", cfg.namespace) from None


def _broken_stream(e: Exception) -> bool:
    """An exec stream that failed on the way (a closed websocket, a reset connection), as
    opposed to a bug in the code reading it."""
    from websocket import WebSocketException

    return isinstance(e, (OSError, WebSocketException))


def collect_pod(
    core: Any, cfg: CollectConfig, pod_name: str, log: Callable[[str], None] = print, *, listed: bool = False
) -> Path:
    """Collect one pod's bundle; returns its directory. Raises CollectError when the target
    pod disappears (after writing what was collected): whenever the pod goes away, at
    whatever moment, the message names the pod and says it is being deleted or disappeared.
    ``listed``: the name came from a selector listing an instant before."""
    info = _describe_target(core, cfg, pod_name, log, listed)
    sampler = sampler_pod(core, cfg, info["node"])
    out, meta = _new_bundle(cfg, info, sampler, log)
    csv = out / "cpu_stat.csv"

    trace_res: dict[str, Any] = {}
    traced = cfg.pprof_port is not None
    th = threading.Thread(
        target=fetch_trace,
        args=(core, cfg, info["pod"], cfg.duration_s, out / "trace.out", trace_res),
        daemon=True,
    )

    def on_start(facts: dict[str, Any]) -> None:
        # the levels and their limits as soon as the sampler has opened them: a collector
        # killed mid-window leaves a bundle that names them
        record_start(meta, facts)
        to_meta(out / "meta.json", meta)
        # the trace is asked for once the sampler reads: an exec takes longer to start than
        # a port-forward, and a trace begun first has events before the first sample
        if traced and th.ident is None:
            th.start()

    deadline = time.monotonic() + cfg.duration_s

    def trace_ended() -> bool:
        # With a trace, the samples run past the window until its body has ended: a
        # throttled, overloaded process serves /debug/pprof/trace late (measured: its trace
        # began 15 s after the request at 0.3 CPU with a backlog), and the samples must
        # cover the trace's whole span to place its events in their periods
        done = trace_res.get("mono_done_ns")  # set as the trace thread leaves the stream
        return time.monotonic() >= deadline and done is not None and time.monotonic_ns() - done >= TRACE_TAIL_NS

    gone, bad_file = _sample_window(
        core, cfg, info, sampler, out, csv, meta, deadline, traced, trace_ended, on_start, log
    )
    if traced:
        _end_trace(cfg, info, th, trace_res, gone, meta, out, log)
    meta["mono_end_ns"] = last_t(csv) if csv.exists() else None
    meta["complete"] = gone is None
    if gone:
        meta["error"] = gone
    to_meta(out / "meta.json", meta)
    if gone:
        if bad_file is not None:
            raise CgroupFormatError(f"{gone}; the samples collected so far are in {out}")
        raise CollectError(f"{gone}; the samples collected so far are in {out}")
    if traced and not trace_res.get("complete"):
        # a part the user asked for is missing: say so with a failing exit, keep the rest.
        # A pod deleted at the very end of the window cuts only the port-forward: name that.
        why, _ = pod_gone(core, cfg, info)
        raise CollectError(
            f"{why + '; ' if why else ''}the trace is incomplete or absent "
            f"({trace_res.get('error', 'still running')}); the samples are complete in {out}"
        )
    return out


def _describe_target(
    core: Any, cfg: CollectConfig, pod_name: str, log: Callable[[str], None], listed: bool
) -> dict[str, Any]:
    """What the collection needs to know of the target pod (see :func:`.target.describe`);
    a pod being deleted is logged as such."""
    pod = _read_target(core, cfg, pod_name, listed)
    try:
        info = describe(pod, cfg.container)
    except CollectError as e:
        # a pod being torn down may have no running container left to describe
        why = gone_reason(pod, {"pod": pod_name})
        if why is None:
            raise
        raise CollectError(f"{why}; {e}") from None
    if pod.metadata.deletion_timestamp is not None:
        log(
            f"{info['pod']}: being deleted (since {pod.metadata.deletion_timestamp}): the collection ends "
            "when the kubelet stops its containers"
        )
    return info


def _new_bundle(
    cfg: CollectConfig, info: dict[str, Any], sampler: str, log: Callable[[str], None]
) -> tuple[Path, dict[str, Any]]:
    """The pod's new bundle directory and its first meta.json (written); returns both."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    # the names come from the API server: each is made a safe path component (a hostile
    # server's "../x" stays inside --out); meta.json keeps them as sent
    out = bundle_dir(cfg.out, info["namespace"], info["pod"], info["container"], stamp)
    odd = [info[k] for k in ("namespace", "pod", "container") if safe_component(info[k]) != info[k]]
    if odd:
        log(f"{odd[0]!r}: not a valid Kubernetes name; its bundle is {out}")
    out.mkdir(parents=True, exist_ok=False)
    meta: dict[str, Any] = {
        **info,
        "period_us": 100_000,
        "burst_us": 0,
        "cgroup_version": None,
        "cgroup_paths": [],
        "sampler": {"pod": sampler, "namespace": cfg.sampler_namespace, "interval_ns": cfg.interval_us * 1000},
        "mono_start_ns": None,
        "mono_end_ns": None,
        "wall_start": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "restarts": [],
        "levels": [],
        # a third-party binary's build settings cannot be read from outside its pod
        "default_godebug": None,
    }
    meta = new_meta("kube", out.name, **meta)
    to_meta(out / "meta.json", meta)
    log(
        f"{info['pod']}: node {info['node']}, {info['qos']}, limit {info['cpu_limit']}, GOMAXPROCS env "
        f"{info['gomaxprocs_env']}, sampler {sampler}"
    )
    return out, meta


def _sample_window(
    core: Any,
    cfg: CollectConfig,
    info: dict[str, Any],
    sampler: str,
    out: Path,
    csv: Path,
    meta: dict[str, Any],
    deadline: float,
    traced: bool,
    trace_ended: Callable[[], bool],
    on_start: Callable[[dict[str, Any]], None],
    log: Callable[[str], None],
) -> tuple[str | None, Any]:
    """Sample both cgroup levels into ``csv`` until ``deadline`` (past it until the trace has
    ended, when ``traced``), a restarted container's new cgroup again; returns why the
    collection ended early (None: it did not) and the cgroup file error behind that, if any."""
    gone = None
    bad_file = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0.05:
            break
        # the API's facts; the sampler, which sees the node's tree, knows the path rules. A
        # restarted container gets a new cgroup; the pod's stays, and both are sampled again
        targets = [
            ("container", f"kube-container:{info['pod_uid']}:{info['qos']}:{info['container_id']}"),
            ("pod", f"kube-pod:{info['pod_uid']}:{info['qos']}"),
        ]
        try:
            longest, until = (left + TRACE_LATE_S, trace_ended) if traced else (left, None)
            rc, stderr, summary = stream_sampler(core, cfg, sampler, targets, longest, csv, log, on_start, until=until)
        except Exception as e:
            # an exec that broke off (its websocket closed without an exit status): if the
            # target went away meanwhile, that is the news; otherwise the error itself
            why, _ = pod_gone(core, cfg, info)
            if why is None and _broken_stream(e):
                raise CollectError(
                    f"the sampler's exec on {sampler} broke off ({e}); the samples collected so far are in {out}"
                ) from None
            if why is None:
                raise  # not a failed stream: a bug, with its traceback
            gone = f"{why} (the sampler's exec ended with: {e})"
            break
        if summary is not None:
            record_summary(meta, summary)
        if meta["mono_start_ns"] is None and csv.exists():
            meta["mono_start_ns"] = first_t(csv)
        if rc == 0:
            break
        stop = str((summary or {}).get("stop_reason", ""))
        bad_file = sampler_error((summary or {}).get("error"))
        if bad_file is not None:
            # a cgroup file not as the kernel writes it: the node's data is the news, not the pod
            gone = str(bad_file)
            break
        if deadline - time.monotonic() <= 0.05:
            if traced:
                # past the window, while the samples waited for the trace: the window is whole
                meta.setdefault("notes", []).append(
                    f"the samples end before the trace may: the sampler stopped past the window "
                    f"(exit {rc}: {stop or stderr.strip()[-200:]})"
                )
            break
        # the sampler exits 3 when a cgroup it reads disappears (its JSON summary says so too)
        if not stop.startswith("cgroup gone") and rc != 3:
            gone = _sampler_stopped(core, cfg, info, sampler, rc, stderr)
            break
        # the container's cgroup went away: a restart (the kubelet starts a new container with
        # a new ID, and cgroup) or a deletion; wait for the one or report the other
        gone, new_id = wait_for_container(core, cfg, info, deadline)
        if gone or new_id is None:
            if new_id is None and not gone:
                meta.setdefault("notes", []).append("the container exited and did not come back within the window")
            break
        _record_restart(info, meta, out, new_id, log)
    return gone, bad_file


def _sampler_stopped(core: Any, cfg: CollectConfig, info: dict[str, Any], sampler: str, rc: int, stderr: str) -> str:
    """Why the sampler stopped with ``rc`` for another reason than a cgroup gone: the pod's
    fate as the API tells it, and what the sampler said."""
    # A pod deleted before this exec opened its cgroups makes the sampler exit 2 ("none
    # of the alternatives exists"), not 3: whether a deletion shows as "gone" or as
    # "not found" depends only on when it happened. Ask the API which it was.
    why, _ = pod_gone(core, cfg, info)
    sampler_said = f"sampler stopped (exit {rc}): {stderr.strip()[-300:]}"
    if "flag provided but not defined" in stderr:
        sampler_said += (
            f"; the sampler image of {sampler} is older than this collector: rebuild and roll out "
            "gmp-sampler (collectors/deploy/README.md)"
        )
    return f"{why}; {sampler_said}" if why else sampler_said


def _record_restart(
    info: dict[str, Any], meta: dict[str, Any], out: Path, new_id: str, log: Callable[[str], None]
) -> None:
    """The container restarted with ID ``new_id``: logged, recorded in meta.json, and the
    one sampled from now on."""
    log(
        f"{info['pod']}: container restarted ({info['container_id']} -> {new_id}); "
        "sampling the new one (its counters restart: a new segment)"
    )
    # on the samples' clock (the node's CLOCK_MONOTONIC, not this process's): the old
    # container's last read; the new one's reads follow it (the analysis cuts there)
    csv = out / "cpu_stat.csv"
    last = last_t(csv) if csv.exists() else None
    meta["restarts"].append({"mono_ns": last, "clock": "samples", "old": info["container_id"], "new": new_id})
    info["container_id"] = new_id
    to_meta(out / "meta.json", meta)


def _end_trace(
    cfg: CollectConfig,
    info: dict[str, Any],
    th: threading.Thread,
    trace_res: dict[str, Any],
    gone: str | None,
    meta: dict[str, Any],
    out: Path,
    log: Callable[[str], None],
) -> None:
    """Once the samples have ended: wait for the trace thread, and record in meta.json what
    the trace gave (and the facts its header tells)."""
    if gone is None and th.is_alive():
        meta.setdefault("notes", []).append(
            f"the trace was still arriving {TRACE_LATE_S:.0f} s past the window, when the samples ended: "
            "its last part has no samples"
        )
    if th.ident is not None:  # not started when the sampler never did
        th.join(timeout=(cfg.duration_s + 60) if gone is None else 5)
    meta["trace"] = dict(trace_res)
    if not trace_res.get("complete"):
        log(f"{info['pod']}: trace incomplete or absent: {trace_res.get('error', 'still running')}")
    facts_from_trace(meta, out / "trace.out", log)


def collect(cfg: CollectConfig, log: Callable[[str], None] = print) -> list[Path]:
    """Collect every target pod (in parallel); returns the bundle directories."""
    validate(cfg)
    core = kube_client(cfg)
    if cfg.pod:
        names = [cfg.pod]
    else:
        pods = api_call(
            core.list_namespaced_pod, "list", "pods", cfg.namespace, cfg.namespace, label_selector=cfg.selector
        )
        running = [p for p in pods.items if p.status.phase == "Running"]
        # a pod being deleted still reads "Running" until the kubelet has stopped it (a
        # rollout's old pod, say): its collection could only end early, so it is left out
        deleting = [p.metadata.name for p in running if p.metadata.deletion_timestamp is not None]
        names = [p.metadata.name for p in running if p.metadata.deletion_timestamp is None]
        for n in deleting:
            log(f"{n}: being deleted: not collected")
        if not names:
            also = f" (being deleted: {', '.join(deleting)})" if deleting else ""
            raise CollectError(f"no running pod matches {cfg.selector!r} in namespace {cfg.namespace!r}{also}")
    results: dict[str, Path | Exception] = {}

    def one(name: str) -> None:
        try:
            results[name] = collect_pod(core, cfg, name, log, listed=not cfg.pod)
        except Exception as e:  # noqa: BLE001 - reported per pod below
            results[name] = e

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for bug in results.values():
        if isinstance(bug, Exception) and not isinstance(bug, GmpError):
            raise bug  # not a collection that failed: a bug, shown with its traceback
    errors = [f"{n}: {r}" for n, r in results.items() if isinstance(r, Exception)]
    if errors:
        raise CollectError("; ".join(errors))
    return [r for r in results.values() if isinstance(r, Path)]
