"""gmp-sampler exec'd in the sampler DaemonSet pod: its CSV streamed into the bundle, its JSON
facts read from stderr."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..bundle import HOST_STAT_COLUMNS
from .api import _call, private
from .config import SAMPLER_ROOT, CollectConfig


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
    spec: str,
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
        spec,
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
        private(core).connect_get_namespaced_pod_exec,
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


def _record_summary(meta: dict[str, Any], summary: dict[str, Any]) -> None:
    """Put one sampler exec's JSON summary into meta: the cgroup it sampled and its
    bandwidth settings as the kernel has them (period, quota, burst), the scheduling
    policy it got (not the one asked for: inside a pod SCHED_FIFO is refused and the
    summary says why), its first deadline and its lateness. Every exec's summary (one more
    per container restart) is kept in ``sampler.execs``; the top-level fields are the first's."""
    for i, c in enumerate(summary.get("cgroups") or []):
        meta["cgroup_version"] = c.get("version", meta["cgroup_version"])
        if c.get("path") and c["path"] not in meta["cgroup_paths"]:
            meta["cgroup_paths"].append(c["path"])
        lim = c.get("limits")
        first_exec = not meta["sampler"].get("execs")  # a restart's exec keeps them in execs
        if i == 0 and first_exec and isinstance(lim, dict):
            # the kernel's settings of the sampled cgroup, not the pod spec's: the contract
            # checks them on the next write
            meta.update({k: lim[k] for k in ("period_us", "quota_us", "burst_us") if k in lim})
    # the node's facts, from the sampler that runs there (the collector cannot see the node)
    for k in ("kernel", "ncpu"):
        if summary.get(k) and meta.get(k) is None:
            meta[k] = summary[k]
    s = meta["sampler"]
    execs = s.setdefault("execs", [])
    execs.append(dict(summary))  # each exec's cgroups and their limits (a restart may differ)
    if len(execs) == 1:
        for k, v in execs[0].items():
            if k != "cgroups":
                s.setdefault(k, v)
    if summary.get("policy_error"):
        s["policy_error"] = summary["policy_error"]


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
