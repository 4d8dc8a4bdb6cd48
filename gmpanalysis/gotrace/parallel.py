"""Reading a big trace on several cores: its generations split into parts, each built by a
process of its own, joined in file order into the tables one builder would have made.

A trace's generations are units the runtime restates its goroutines' and Ps' states in,
but the builder still carries state from one to the next: each thread's goroutine, P and
whether it runs, the intervals and sweeps still open, the thread's last start (a later
GoLabel names it), each goroutine's last interval (two of them may overlap on threads whose
clocks disagree) and each thread's last time. A part read on its own does not know what the
parts before it left, so:

* a thread's state at the start of a part is taken from the generation before it, read
  once more (the statuses the runtime writes in every generation rebuild it); after the
  parts are read, the state each really started from is known, and a part that started
  from a different one for a thread it uses is read again, in this process, from the right
  one: the tables never depend on the guess;
* what a part could not resolve (the first stop of each thread, which closes the intervals
  left open before it; labels of threads it saw no start on; each goroutine's first
  interval, which may overlap its last one before) is kept by the part
  (:class:`~.tables.Edge`) and resolved here as the parts are joined, in order;
* a part whose threads' clocks go back across the join, or that warns or fails, makes the
  whole trace read again on one core, so that the warnings and errors are those of the
  one-core read.

Parts are read by processes forked from this one (Linux; the compiled loops, loaded before
the fork, are shared), each writing its rows to an in-memory file (``memfd``) that this
process reads back while the later parts are still read. This process reads the first part
itself.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import pickle
import signal
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import tables as _tables
from .decode import new_info
from .edge import Edge
from .memory import trim
from .wire import Generation

# A part is at least this many bytes of trace: below it, the fork, the second read of a
# generation and joining the rows cost more than the part's share of the work.
PART_MIN_BYTES = 4 << 20
# the state of a thread the builder has not seen (no goroutine, not running, no P)
NO_STATE = (-1, 0, -1)
# the most processes a read starts, and the fewest CPUs it starts more than one on
MAX_WORKERS = 64
MIN_CPUS = 4
# what a part tells of its own reading (see decode.new_info)
INFO_KEYS = ("events", "first_ns", "last_ns", "clock_snapshots", "clock_steps_back", "m_last", "m_first", "frequency")
# the processes a read starts when not told (None: one per CPU this process may use, see
# cpus()); the fleet's workers, one per CPU already, set 1
WORKERS: int | None = None


def available() -> bool:
    """Whether parts can be read in other processes here (fork and memfd: Linux)."""
    return sys.platform == "linux" and hasattr(os, "fork") and hasattr(os, "memfd_create")


def workers() -> int:
    """How many processes a read starts when not told: one per CPU where there are at least
    MIN_CPUS, else one (on 2 CPUs two parts read a 38 MB trace in 0.58 s against 0.61 s on
    one core, for 45 % more CPU time)."""
    if WORKERS is not None:
        return WORKERS
    n = cpus()
    return min(n, MAX_WORKERS) if n >= MIN_CPUS else 1


def cpus() -> int:
    """The CPUs this process may run on: its affinity mask, held to the CPU limit of its
    cgroup and the cgroups above it (a reader in a pod limited to 2 CPUs on a 64-CPU node
    would be throttled, not sped up, by 64 processes). A limit of 1.5 CPUs gives 2, as
    Go's GOMAXPROCS rule rounds it up."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    limit = _cgroup_cpu_limit()
    if limit is not None:
        n = min(n, max(1, math.ceil(limit)))
    return max(1, n)


def _cgroup_cpu_limit(proc: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> float | None:
    """The tightest CPU limit (quota / period) on this process's cgroup and its ancestors,
    cgroup v2 or v1; None when there is none or it cannot be read."""
    from .. import cgroup as cg

    try:
        lines = Path(proc).read_text().splitlines()
    except OSError:
        return None
    best: float | None = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, ctrls, rel = parts
        if ctrls == "":
            base, name = Path(root), "cpu.max"
        elif "cpu" in ctrls.split(","):
            base = next((Path(root) / d for d in (ctrls, "cpu,cpuacct", "cpu") if (Path(root) / d).is_dir()), None)
            name = "cpu.cfs_quota_us"
            if base is None:
                continue
        else:
            continue
        d = base / rel.lstrip("/")
        while True:
            with contextlib.suppress(OSError, ValueError, cg.CgroupFormatError):
                if name == "cpu.max":
                    quota, period = cg.parse_cpu_max((d / name).read_bytes(), source=str(d / name))
                else:
                    quota = cg.parse_quota_v1((d / name).read_bytes(), source=str(d / name))
                    period = cg.parse_period_v1((d / "cpu.cfs_period_us").read_bytes(), source=str(d))
                if quota is not None:
                    best = quota / period if best is None else min(best, quota / period)
            if d == base or base not in d.parents:
                break
            d = d.parent
    return best


def plan(chunks: list[list[Generation]], workers: int) -> list[list[list[Generation]]]:
    """The chunks in at most ``workers`` parts of consecutive chunks and about equal bytes,
    each of at least PART_MIN_BYTES; one part when the trace is too small to share."""
    if not chunks:
        return []
    size = chunks[-1][-1].end - chunks[0][0].start
    k = max(1, min(workers, len(chunks), size // PART_MIN_BYTES))
    parts: list[list[list[Generation]]] = [[] for _ in range(k)]
    lo = chunks[0][0].start
    for c in chunks:
        i = min(k - 1, (c[0].start - lo) * k // size)  # by where the chunk begins
        parts[i].append(c)
    return [p for p in parts if p]


def read(
    data: bytes,
    buf: np.ndarray,
    version: int,
    source: str,
    parts: list[list[list[Generation]]],
    builder: _tables.Builder,
    info: dict[str, Any],
    feed: Callable[[_tables.Builder, dict[str, Any], list[Generation]], None],
    progress: Callable[[int], None] | None,
    release: Callable[[int], None] | None,
) -> bool:
    """Build the tables of ``parts`` into ``builder`` (a new one) and ``info``, the first
    part here and the others in forked processes; False when the trace must be read again
    on one core (``builder`` and ``info`` are then spoilt). ``feed(builder, info, chunk)``
    decodes one chunk into a builder, as the one-core read does."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        workers = _Workers(data, buf, version, source, parts, builder.want, feed)
        try:
            for i, chunk in enumerate(parts[0]):
                feed(builder, info, chunk)
                if i == 0:  # the compiled loops are loaded now: the processes share them
                    workers.start(release)
                if progress is not None:
                    progress(chunk[-1].end)
                if release is not None:
                    release(chunk[-1].end)
        except Exception:  # raised again by the one-core read, after its warnings
            workers.stop()
            return False
        try:
            if caught:
                return False
            for k in range(1, len(parts)):
                got, mm = workers.result(k)
                if got is not None and _guess_missed(builder, got):
                    # rare: read it again, here, from the state the parts before it left
                    got = _read_part(data, buf, version, source, parts[k], builder.want, feed, start=builder.m_state)
                joined = got is not None and join(builder, info, got, _releaser(mm))
                del got
                if mm is not None:
                    with contextlib.suppress(BufferError):  # a view still held: unmapped when it goes
                        mm.close()
                if not joined:
                    return False
                trim()
                if progress is not None:
                    progress(parts[k][-1][-1].end)
        finally:
            workers.stop()
        if release is not None:
            release(parts[-1][-1][-1].end)
        return not caught


class _Workers:
    """A forked process per part but the first, each writing what it built to a memfd."""

    def __init__(
        self,
        data: bytes,
        buf: np.ndarray,
        version: int,
        source: str,
        parts: list[list[list[Generation]]],
        want: frozenset[str],
        feed: Callable[[_tables.Builder, dict[str, Any], list[Generation]], None],
    ) -> None:
        self.args = (data, buf, version, source)
        self.parts, self.want, self.feed = parts, want, feed
        self.pids: dict[int, int] = {}
        self.fds: dict[int, int] = {}

    def start(self, release: Callable[[int], None] | None) -> None:
        # the warm-up generation of part k: the last one before it
        for k in range(1, len(self.parts)):
            fd = os.memfd_create(f"gmpanalysis-trace-part{k}", os.MFD_CLOEXEC)
            self.fds[k] = fd
            with warnings.catch_warnings():
                # Python >= 3.12 warns of fork() in a process with threads (OpenBLAS's pool
                # sleeps there); the child runs only this module's numpy and compiled code
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # pragma: no cover (the child; its result is checked by the parent)
                code = 1
                try:
                    warm = self.parts[k - 1][-1][-1]
                    got = _read_part(*self.args, self.parts[k], self.want, self.feed, warm=warm, release=release)
                    _dump(fd, got)
                    code = 0
                finally:
                    os._exit(code)
            self.pids[k] = pid

    def result(self, k: int) -> tuple[dict[str, Any] | None, mmap.mmap | None]:
        """Part k as its process built it (None: it failed, or warned), its arrays views of
        the mapped file given beside it (close it once they are used)."""
        pid = self.pids.pop(k)
        _, status = os.waitpid(pid, 0)
        fd = self.fds.pop(k)
        try:
            if os.waitstatus_to_exitcode(status) != 0:
                return None, None
            return _load(fd)
        finally:
            os.close(fd)

    def stop(self) -> None:
        """End the processes still running (an error or an interrupt here) and free their files."""
        for pid in self.pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        for fd in self.fds.values():
            os.close(fd)
        self.pids, self.fds = {}, {}


# arrays are written after the pickle at offsets of this alignment (numpy's fast paths
# want aligned data)
ALIGN = 64


def _dump(fd: int, obj: object) -> None:
    """Write ``obj`` to the file: a pickle whose arrays follow it raw (protocol 5's
    out-of-band buffers), so that they are read back as views, not copies."""
    bufs: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    sizes = [r.nbytes for r in raws]
    top = np.array([len(head), len(raws), *sizes], dtype=np.int64).tobytes()
    with os.fdopen(fd, "wb", closefd=False) as f:
        f.write(top)
        f.write(head)
        at = len(top) + len(head)
        for r in raws:
            pad = -at % ALIGN
            f.write(bytes(pad))
            f.write(r)
            at += pad + r.nbytes


def _load(fd: int) -> tuple[object, mmap.mmap | None]:
    """What :func:`_dump` wrote, and the mapping its arrays are views of."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, None
    mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    n_head, n_buf = (int(x) for x in np.frombuffer(view[:16], dtype=np.int64))
    sizes = np.frombuffer(view[16 : 16 + 8 * n_buf], dtype=np.int64).tolist()
    at = 16 + 8 * n_buf
    head = view[at : at + n_head]
    at += n_head
    bufs = []
    for n in sizes:
        at += -at % ALIGN
        bufs.append(view[at : at + n])
        at += n
    obj = pickle.loads(head, buffers=bufs)
    del head, bufs, view
    return obj, mm


def _read_part(
    data: bytes,
    buf: np.ndarray,
    version: int,
    source: str,
    chunks: list[list[Generation]],
    want: frozenset[str],
    feed: Callable[[_tables.Builder, dict[str, Any], list[Generation]], None],
    *,
    warm: Generation | None = None,
    start: dict[int, tuple[int, int, int]] | None = None,
    release: Callable[[int], None] | None = None,
) -> dict[str, Any] | None:
    """One part's builder state, from the threads' states ``start`` or those that reading
    ``warm`` (the generation before) alone gives; None if reading it warned or failed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if start is None:
                w = _tables.Builder(want)
                feed(w, new_info(), [warm] if warm is not None else [])
                start = w.m_state
                del w
            size = chunks[-1][-1].end - chunks[0][0].start
            b = _tables.Builder(want, size)
            b.m_state = dict(start)
            b.edge = Edge()
            info = new_info()
            info["m_first"] = {}
            for chunk in chunks:
                feed(b, info, chunk)
                if release is not None:
                    release(chunk[-1].end)
        except Exception:  # the one-core read raises it again, where it lies
            return None
    if caught:
        return None
    return export(b, start, info)


def export(b: _tables.Builder, start: dict[int, tuple[int, int, int]], info: dict[str, Any]) -> dict[str, Any]:
    """What :func:`join` needs of a part's builder (``b.edge`` set before it read the part)
    that started its threads in the states ``start``, and of its ``info``."""
    e = b.edge
    assert e is not None
    return {
        "run": b.run.finish(),
        "sweeps": b.sweeps.finish(),
        "heap": b.heap.finish(),
        "pending_run": b.pending_run,
        "pending_sweep": b.pending_sweep,
        "last_start": b.last_start,
        "carry": b.carry,
        "clashes": b.clashes,
        "few_parts": b.few_parts,
        "glob_parts": b.glob_parts,
        "names": b.names,
        "m_state": {m: b.m_state[m] for m in e.touched},
        "guess": {m: start.get(m, NO_STATE) for m in e.touched},
        "edge": e,
        "info": {k: info[k] for k in INFO_KEYS},
    }


def _guess_missed(b: _tables.Builder, got: dict[str, Any]) -> bool:
    """Whether the part started a thread it uses from another state than the parts before
    it left (what it built then differs from what one builder would have)."""
    return any(b.m_state.get(m, NO_STATE) != g for m, g in got["guess"].items())


def _releaser(mm: mmap.mmap | None) -> Callable[[np.ndarray], None] | None:
    """A function that drops from this process the pages of an array mapped from ``mm``
    once it is copied (they stay in the file; mapped, they count in this process's
    resident size until the whole part is joined)."""
    if mm is None:
        return None
    base = np.frombuffer(mm, dtype=np.uint8).ctypes.data

    def release(a: np.ndarray) -> None:
        lo = a.ctypes.data - base
        if a.nbytes and 0 <= lo < len(mm):
            start = -(-lo // mmap.PAGESIZE) * mmap.PAGESIZE
            end = (lo + a.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
            if end > start:
                mm.madvise(mmap.MADV_DONTNEED, start, end - start)

    return release


def join(
    b: _tables.Builder,
    info: dict[str, Any],
    got: dict[str, Any],
    copied: Callable[[np.ndarray], None] | None = None,
) -> bool:
    """Append one part to the builder of the parts before it, as if one builder had read
    them all; False when the threads' clocks go back across the join (a damaged trace:
    read on one core, it warns). ``copied`` is given each of the part's columns once it is
    in the builder."""
    gi = got["info"]
    if gi["clock_steps_back"] or any(t < info["m_last"].get(m, -1) for m, t in gi["m_first"].items()):
        return False
    e: Edge = got["edge"]
    run = b.run
    off = run.next_id
    # the intervals and sweeps left open before: closed by the thread's first stop here
    for m, t in e.first_stop.items():
        if m in b.pending_run:
            at = run.positions(b.pending_run.pop(m))
            run.col("end")[at[at >= 0]] = t
    for m, x in e.orphans:
        if m in b.last_start:
            b.label_row(b.last_start[m], x)
    for m, (t, sw, rc) in e.first_sweep.items():
        if m in b.pending_sweep:
            b.end_sweeps(b.pending_sweep.pop(m), t, sw, rc)
    cross = _cross_clashes(b, e, off, got["carry"])
    # the part's rows, its label ids turned into the builder's
    cols = got["run"]
    names = got["names"]
    remap = np.zeros(max(len(names), 1), dtype=np.int64)
    for name, i in names.items():
        remap[i] = b.names.setdefault(name, len(b.names))
    b._label_room()
    cols["lab"] = remap[cols["lab"]].astype(run.dtypes["lab"])
    run.append(cols, copied)
    del cols
    for m, ids in got["pending_run"].items():
        b.pending_run.setdefault(m, []).extend(i + off for i in ids)
    for m, i in got["last_start"].items():
        b.last_start[m] = i + off
    soff = b.sweeps.next_id
    b.sweeps.append(got["sweeps"], copied)
    for m, ids in got["pending_sweep"].items():
        b.pending_sweep.setdefault(m, []).extend(i + soff for i in ids)
    b.heap.append(got["heap"], copied)
    b.few_parts.extend(got["few_parts"])
    b.glob_parts.extend(got["glob_parts"])
    b.clashes.extend(cross)
    b.clashes.extend((g, x + off, y + off, sw) for g, x, y, sw in got["clashes"])
    b.m_state.update(got["m_state"])
    # the threads' last times, the clock and the counts
    for m, t in gi["m_last"].items():
        info["m_last"][m] = max(info["m_last"].get(m, -1), t)
    info["events"] += gi["events"]
    for key, pick in (("first_ns", min), ("last_ns", max)):
        if gi[key] is not None:
            info[key] = gi[key] if info[key] is None else pick(info[key], gi[key])
    info["clock_snapshots"].extend(gi["clock_snapshots"])
    info["frequency"] = gi["frequency"] or info["frequency"]
    return True


def _cross_clashes(
    b: _tables.Builder, e: Edge, off: int, part_carry: tuple[np.ndarray, ...]
) -> list[tuple[int, int, int, bool]]:
    """The pairs of a goroutine's last interval before the part and its first in it that
    may overlap, as one builder finds them chunk by chunk (see Builder._find_clashes), and
    the builder's carried intervals after the part."""
    cg, cid, cend, cdone = b.carry
    found: list[tuple[int, int, int, bool]] = []
    horizon = -(1 << 62)  # the latest chunk end so far: older done intervals end before it
    alive = np.ones(len(cg), dtype=bool)
    for hg, hid, hstart, last in e.heads:
        at = np.searchsorted(cg, hg)
        known = at < len(cg)
        known[known] = cg[at[known]] == hg[known]
        ci, bi = at[known], np.flatnonzero(known)
        live = alive[ci] & (~cdone[ci] | (cend[ci] > horizon))
        ci, bi = ci[live], bi[live]
        cross = ~cdone[ci] | (hstart[bi] < cend[ci])
        ci, bi = ci[cross], bi[cross]
        found += zip(hg[bi].tolist(), cid[ci].tolist(), (hid[bi] + off).tolist(), [False] * len(bi), strict=True)
        # met here: the part's own last interval of the goroutine replaces the carried one
        alive[at[known]] = False
        horizon = max(horizon, last)
    keep = alive & (~cdone | (cend > horizon))
    pg, pid, pend, pdone = part_carry
    g2 = np.r_[cg[keep], pg]
    o = np.argsort(g2, kind="stable")
    b.carry = (g2[o], np.r_[cid[keep], pid + off][o], np.r_[cend[keep], pend][o], np.r_[cdone[keep], pdone][o])
    return found
