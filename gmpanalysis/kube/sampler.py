"""gmp-sampler exec'd in the sampler DaemonSet pod: its CSV streamed into the bundle, its JSON
facts read from stderr."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..bundle import HOST_STAT_COLUMNS
from .api import api_call, private
from .config import SAMPLER_ROOT, CollectConfig

LIMITS_COLUMNS = ("t_ns", "prev_ns", "cgroup", "period_us", "quota_us", "burst_us")
# the levels sampled, in --cgroup order: the process's own cgroup first, then the pod's, whose
# quota (the sum of its containers' limits) runs on a bandwidth timer of its own
LEVELS = ("container", "pod")


def _csv_field(v: Any) -> str:
    """One CSV field: null as empty, text quoted as RFC 4180 does when it must be."""
    if v is None:
        return ""
    s = str(v)
    if any(c in s for c in ',"\r\n'):
        return '"' + s.replace('"', '""') + '"'
    return s


class SamplerStderr:
    """The sampler's stderr, line by line. Go and Python exchange facts as JSON: a line that
    is a JSON object is a fact (``{"host_stat": {...}}`` a /proc/stat row, appended to
    host_stat.csv at once; ``{"limits": {...}}`` a row of every level's CFS limits (at its
    first read and at every change), appended to limits.csv at once; ``{"start": {...}}``
    what it samples, the policy it got and its first deadline, sent before the first read and
    handed to ``on_start``; ``{"summary": {...}}`` its closing summary; ``{"error": {...}}``
    why it could not start); any other line is prose for the human log."""

    def __init__(
        self,
        host_csv: Path,
        log: Callable[[str], None],
        limits_csv: Path | None = None,
        on_start: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.host_csv = host_csv
        self.limits_csv = limits_csv
        self.log = log
        self.on_start = on_start
        self.pending = ""
        self.prose: list[str] = []
        self.start: dict[str, Any] | None = None
        self.summary: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None

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
            if isinstance(obj, dict) and isinstance(obj.get("limits"), dict) and self.limits_csv is not None:
                self._limits_row(obj["limits"])
                return
            if isinstance(obj, dict) and isinstance(obj.get("summary"), dict):
                self.summary = obj["summary"]
                return
            if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
                self.error = obj["error"]  # the prose line before it said the same to the log
                return
            if isinstance(obj, dict) and isinstance(obj.get("start"), dict):
                self.start = obj["start"]
                if self.on_start is not None:
                    self.on_start(self.start)
                return
        self.prose.append(line)
        self.log(line)

    def _host_row(self, row: dict[str, Any]) -> None:
        new = not self.host_csv.exists() or self.host_csv.stat().st_size == 0
        with open(self.host_csv, "a") as f:
            if new:
                f.write(",".join(HOST_STAT_COLUMNS) + "\n")
            f.write(",".join(str(int(row[c])) for c in HOST_STAT_COLUMNS) + "\n")

    def _limits_row(self, row: dict[str, Any]) -> None:
        """One limits.csv row, on disk when this returns. A new exec (after a container
        restart) continues the file: its first read of each level is a row with no prev_ns,
        as the read before it was another process's."""
        assert self.limits_csv is not None
        new = not self.limits_csv.exists() or self.limits_csv.stat().st_size == 0
        with open(self.limits_csv, "a") as f:
            if new:
                f.write(",".join(LIMITS_COLUMNS) + "\n")
            f.write(",".join(_csv_field(row.get(c)) for c in LIMITS_COLUMNS) + "\n")


def sampler_argv(
    cfg: CollectConfig, targets: list[tuple[str, str]], seconds: float, stop_on_stdin: bool = False
) -> list[str]:
    """The sampler's command line: one ``--cgroup NAME=SPEC`` per level (cpu_stat.csv's
    ``cgroup`` column then names the level of each row), every level's limits as JSON lines
    on stderr, the node's /proc/stat and the summary there too. With ``stop_on_stdin`` the run
    also ends when a line is written to its stdin (``seconds`` is then the longest it runs)."""
    argv = ["/gmp-sampler", "--root", SAMPLER_ROOT, *(["--stop-on-stdin"] if stop_on_stdin else [])]
    for name, spec in targets:
        argv += ["--cgroup", f"{name}={spec}"]
    return argv + [
        "--interval",
        f"{cfg.interval_us}us",
        "--duration",
        f"{seconds:.3f}s",
        "--fifo",
        "--out",
        "-",
        "--host-stat",
        "stderr",
        "--limits-out",
        "stderr",
        "--summary",
        "stderr",
    ]


def stream_sampler(
    core: Any,
    cfg: CollectConfig,
    sampler: str,
    targets: list[tuple[str, str]],
    seconds: float,
    csv: Path,
    log: Callable[[str], None],
    on_start: Callable[[dict[str, Any]], None] | None = None,
    until: Callable[[], bool] | None = None,
) -> tuple[int | None, str, dict[str, Any] | None]:
    """Exec the sampler on ``targets`` ((level name, cgroup spec) pairs, the process's own
    first) and append its CSV rows to ``csv`` as they arrive, its host rows to host_stat.csv
    and its limits rows to limits.csv beside it. With ``until``, the sampler runs for at most
    ``seconds`` and is told to stop (a line on its stdin: an exec cannot be signalled) as soon
    as ``until()`` is true, asked about once a second or more often. Returns (exit code,
    stderr prose, the sampler's summary; or its start facts flagged ``summary_missing`` when
    it died without one; or its ``error`` facts alone when it could not start; or None)."""
    from kubernetes.stream import stream
    from websocket import WebSocketException

    resp = api_call(
        stream,
        "create",
        "pods/exec",
        cfg.sampler_namespace,
        private(core).connect_get_namespaced_pod_exec,
        sampler,
        cfg.sampler_namespace,
        command=sampler_argv(cfg, targets, seconds, stop_on_stdin=until is not None),
        stderr=True,
        stdin=until is not None,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    # every exec writes its header first; a later exec (after a restart) continues the file
    skip_header = csv.exists() and csv.stat().st_size > 0
    err = SamplerStderr(csv.with_name("host_stat.csv"), log, csv.with_name("limits.csv"), on_start)
    pending = ""
    told = False
    with open(csv, "a") as f:
        while True:
            if until is not None and not told and resp.is_open() and until():
                told = True
                try:
                    resp.write_stdin("stop\n")
                except (OSError, WebSocketException):
                    pass  # it ended meanwhile (its own time cap, its cgroup gone): its status follows

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
    if facts is None and err.error is not None:
        facts = {"error": err.error, "summary_missing": True}  # it could not start
    try:
        rc = resp.returncode
    except TypeError:
        # the client reads the exit status from the exec's error channel; a websocket closed
        # before the status was sent leaves it None, which the client then indexes
        rc = None
    return rc, "\n".join(err.prose), facts


def record_start(meta: dict[str, Any], facts: dict[str, Any]) -> None:
    """The cgroups an exec samples, into meta: their paths and version, and from the first
    exec the levels (each with the bandwidth settings the kernel holds at the start: period,
    quota, burst; the process's own cgroup first) and the own cgroup's as the bundle's
    limits. A later exec (a restarted container: a new cgroup) does not replace them; its
    facts are kept in ``sampler.execs``. Also the CPUs the container's threads may run on,
    the node's kernel and CPU count."""
    cgs = [c for c in facts.get("cgroups") or () if isinstance(c, dict)]
    first = not meta.get("levels")
    levels = []
    for i, c in enumerate(cgs):
        meta["cgroup_version"] = c.get("version", meta.get("cgroup_version"))
        if i == 0 and first and isinstance(c.get("cpus"), int) and c["cpus"] > 0:
            meta["cpus_allowed"] = c["cpus"]  # the container's threads' CPUs (a cpuset)
        paths = meta.setdefault("cgroup_paths", [])
        if c.get("path") and c["path"] not in paths:
            paths.append(c["path"])
        lim = c.get("limits")
        if not first or not isinstance(lim, dict):
            continue
        if i == 0:
            # the kernel's settings of the sampled cgroup, not the pod spec's: the contract
            # checks them on the next write
            meta.update({k: lim[k] for k in ("period_us", "quota_us", "burst_us") if k in lim})
        name = c.get("name") or (LEVELS[i] if i < len(LEVELS) else f"level{i}")
        levels.append(
            {"level": name, "cgroup": c.get("path"), **{k: lim.get(k) for k in ("period_us", "quota_us", "burst_us")}}
        )
    if first and levels:
        meta["levels"] = levels
    # the node's facts, from the sampler that runs there (the collector cannot see the node)
    for k in ("kernel", "ncpu"):
        if facts.get(k) and meta.get(k) is None:
            meta[k] = facts[k]


def record_summary(meta: dict[str, Any], summary: dict[str, Any]) -> None:
    """Put one sampler exec's JSON summary into meta: the cgroups it sampled and their
    bandwidth settings as the kernel has them (:func:`record_start`), the scheduling
    policy it got (not the one asked for: inside a pod SCHED_FIFO is refused and the
    summary says why), its first deadline and its lateness. Every exec's summary (one more
    per container restart) is kept in ``sampler.execs``; the top-level fields are the first's."""
    record_start(meta, summary)
    s = meta["sampler"]
    execs = s.setdefault("execs", [])
    execs.append(dict(summary))  # each exec's cgroups and their limits (a restart may differ)
    if len(execs) == 1:
        for k, v in execs[0].items():
            if k != "cgroups":
                s.setdefault(k, v)
    if summary.get("policy_error"):
        s["policy_error"] = summary["policy_error"]


def first_t(csv: Path) -> int | None:
    with open(csv) as f:
        f.readline()
        row = f.readline()
    return int(row.split(",", 1)[0]) if row.strip() else None


def last_t(csv: Path) -> int | None:
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
