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
  (:class:`~.edge.Edge`) and resolved here as the parts are joined, in order;
* a part whose threads' clocks go back across the join, or that warns or fails, makes the
  whole trace read again on one core, so that the warnings and errors are those of the
  one-core read.

Parts are read by Python processes of their own, started with subprocess (posix_spawn or
vfork: none of this process's threads, locks or fork handlers reach them; OpenBLAS's fork
handler deadlocks when another thread is in a BLAS call at a fork, and a notebook kernel has
threads) and kept for the reads to come until they have waited IDLE_S for one. Each opens
the trace through this process's file descriptor (``/proc/PID/fd``: the file this process
mapped, or an in-memory copy of the bytes it was given), and writes its rows to an
in-memory file (``memfd``) of this process, which maps it back while the later parts are
still read. This process reads the first part itself; its warnings are held until the parts
are joined (and dropped if the trace is read again on one core, which gives them again). A
trace is read in parts from PARALLEL_MIN_BYTES on (or when ``workers`` is given).
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..errors import ClockWarning
from . import partprocs as _procs
from . import tables as _tables
from .edge import Edge
from .memory import trim
from .part import NO_STATE, Feeder, read_part
from .wire import Generation

# A trace is read in parts from this many bytes, each part at least PART_MIN_BYTES: a part's
# process costs about 0.5 s to start (a Python importing the reader and loading the
# compiled loops; kept for later reads), and the parts a second read of a generation each
# and the join; a one-core read takes about 1 s per 60 MB.
PARALLEL_MIN_BYTES = 64 << 20
PART_MIN_BYTES = 16 << 20
# the most processes a read starts, and the fewest CPUs it starts more than one on
MAX_WORKERS = 64
MIN_CPUS = 4
# the processes a read starts when not told (None: one per CPU this process may use, see
# cpus()), for the whole process; on_one_core() sets 1 for one thread
WORKERS: int | None = None
_LOCAL = threading.local()


@contextlib.contextmanager
def on_one_core() -> Iterator[None]:
    """Meanwhile, reads in this thread that are not told otherwise read on one core; other
    threads keep their own setting (the fleet's tasks: a worker per CPU already, and a
    worker may run tasks on several threads)."""
    old = getattr(_LOCAL, "workers", None)
    _LOCAL.workers = 1
    try:
        yield
    finally:
        _LOCAL.workers = old


def available() -> bool:
    """Whether parts can be read in other processes here (memfd and /proc/PID/fd: Linux)."""
    return (
        sys.platform == "linux"
        and hasattr(os, "memfd_create")
        and os.path.isdir(f"/proc/{os.getpid()}/fd")
        and not getattr(sys, "frozen", False)  # sys.executable is the application, not a Python
        and bool(sys.executable)
    )


def wanted(asked: int | None, size: int) -> bool:
    """Whether a whole trace of ``size`` bytes may be read in parts: ``asked`` processes (None:
    as many as :func:`workers` gives), more than one, where they can be started. Decided before
    the generations are listed (listing them all maps every batch header of the file)."""
    if asked == 1 or not available():
        return False
    return asked is not None or (size >= PARALLEL_MIN_BYTES and workers() > 1)


def workers() -> int:
    """How many processes a read starts when not told: one per CPU where there are at least
    MIN_CPUS, else one (on 2 CPUs two parts read a 38 MB trace in 0.58 s against 0.61 s on
    one core, for 45 % more CPU time)."""
    mine = getattr(_LOCAL, "workers", None)
    if mine is not None:
        return mine
    if WORKERS is not None:
        return WORKERS
    n = cpus()
    return min(n, MAX_WORKERS) if n >= MIN_CPUS else 1


def cpus() -> int:
    """The CPUs this process may run on: its affinity mask, held to the CPU limit of its
    cgroup and the cgroups above it (a reader in a pod limited to 2 CPUs on a 64-CPU node
    would be throttled, not sped up, by 64 processes). A limit is rounded up: 1.5 CPUs
    give 2, 0.5 give 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    from ..cgroup import process_cpu_limit

    try:
        limit = process_cpu_limit()
    except Exception:  # a cgroup tree this process cannot read: its affinity is all it knows
        limit = None
    if limit is not None:
        n = min(n, max(1, math.ceil(limit)))
    return max(1, n)


def plan(chunks: list[list[Generation]], workers: int, asked: bool = False) -> list[list[list[Generation]]]:
    """The chunks in at most ``workers`` parts of consecutive chunks and about equal bytes,
    each of at least PART_MIN_BYTES; one part when the trace is smaller than
    PARALLEL_MIN_BYTES, unless the parts were ``asked`` for."""
    if not chunks:
        return []
    size = chunks[-1][-1].end - chunks[0][0].start
    if size < PARALLEL_MIN_BYTES and not asked:
        return [chunks]
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
    feed: Feeder,
    progress: Callable[[int], None] | None,
    release: Callable[[int], None] | None,
    fd: int | None = None,
) -> bool:
    """Build the tables of ``parts`` into ``builder`` (a new one) and ``info``, the first
    part here and the others in processes of their own; False when the trace must be read
    again on one core (``builder`` and ``info`` are then spoilt). ``feed(builder, info,
    chunk)`` decodes one chunk into a builder, as the one-core read does; ``fd`` is a file
    descriptor of the trace (None: ``data`` is copied to one)."""
    held: list[str] = []  # the ClockWarnings of the first part
    workers = _procs.Workers(parts, builder.want, version, source, feed)
    try:
        if not workers.start(data, fd):
            return False
        info["quiet"] = held  # decode_chunk holds its warnings here instead of giving them
        t0 = time.monotonic()
        try:
            for chunk in parts[0]:
                feed(builder, info, chunk)
                if progress is not None:
                    progress(chunk[-1].end)
                if release is not None:
                    release(chunk[-1].end)
        except BaseException:  # as on one core: the warnings before it, then the error
            for message in held:
                warnings.warn(message, ClockWarning, stacklevel=4)
            raise
        finally:
            del info["quiet"]
        # a part's process that has not answered by then is taken as lost
        deadline = time.monotonic() + _procs.WAIT_S + _procs.WAIT_PER_PART * (time.monotonic() - t0)
        for k in range(1, len(parts)):
            got, mm = workers.result(k, deadline)
            if got is not None and not _accept_guess(builder, got):
                # rare: read it again, here, from the state the parts before it left
                got = read_part(
                    data, buf, version, source, parts[k], builder.want, feed, start=builder.m_state,
                    frequency=info["frequency"],
                )  # fmt: skip
            joined = got is not None and join(builder, info, got, _releaser(mm))
            del got
            if mm is not None:
                with contextlib.suppress(BufferError):  # join copied what it keeps: never held
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
    for message in held:  # the first part's, now that its tables stand
        warnings.warn(message, ClockWarning, stacklevel=4)
    return True


def _guess_missed(b: _tables.Builder, got: dict[str, Any]) -> bool:
    """Whether the part started a thread it uses from another state than the parts before
    it left (what it built then differs from what one builder would have). The goroutine
    and whether it runs are read at the thread's first event; its P only by a row or sweep
    before an event of its own restates it (each thread restates its P in every generation
    it holds one, so a P guessed wrong rarely matters)."""
    p_used = got["edge"].p_used
    for m, guess in got["guess"].items():
        true = b.m_state.get(m, NO_STATE)
        if true[:2] != guess[:2] or (true[2] != guess[2] and m in p_used):
            return True
    return False


def _accept_guess(b: _tables.Builder, got: dict[str, Any]) -> bool:
    """False where the guess missed (:func:`_guess_missed`); else the P of each thread the
    part neither took nor set is made the true one in the state it hands on."""
    if _guess_missed(b, got):
        return False
    e: Edge = got["edge"]
    for m, guess in got["guess"].items():
        true = b.m_state.get(m, NO_STATE)
        if true[2] != guess[2] and m not in e.p_set and m in got["m_state"]:
            g, run, _ = got["m_state"][m]
            got["m_state"][m] = (g, run, true[2])
    return True


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
    # (copies: the part's file is unmapped once it is joined)
    b.few_parts.extend(
        {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in f.items()} for f in got["few_parts"]
    )
    b.glob_parts.extend(tuple(a.copy() for a in p) for p in got["glob_parts"])
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
