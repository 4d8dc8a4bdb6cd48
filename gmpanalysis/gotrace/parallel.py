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
import pickle
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ClockWarning
from . import tables as _tables
from .decode import decode_chunk, new_info
from .edge import Edge
from .memory import trim
from .wire import Generation

# A trace is read in parts from this many bytes, each part at least PART_MIN_BYTES: a part's
# process costs about 0.3 s to start (the fork server, once per process, about 0.5 s more)
# and to load the compiled loops, and the parts a second read of a generation each and the
# join; a one-core read takes about 1 s per 60 MB.
PARALLEL_MIN_BYTES = 64 << 20
PART_MIN_BYTES = 16 << 20
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
    """Whether parts can be read in other processes here (memfd and /proc/PID/fd: Linux)."""
    return sys.platform == "linux" and hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd")


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
    would be throttled, not sped up, by 64 processes). A limit is rounded up: 1.5 CPUs
    give 2, 0.5 give 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        limit = _cgroup_cpu_limit()
    except Exception:  # a cgroup tree this process cannot read: its affinity is all it knows
        limit = None
    if limit is not None:
        n = min(n, max(1, math.ceil(limit)))
    return max(1, n)


def _cgroup_cpu_limit(proc: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> float | None:
    """The tightest CPU limit (quota / period) on this process's cgroup and its ancestors,
    cgroup v2 or v1; None when there is none or it cannot be read."""
    from .. import cgroup as cg

    try:
        # a cgroup's name may hold any byte but "/" and NUL
        lines = Path(proc).read_bytes().decode("utf-8", "surrogateescape").splitlines()
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
            base = next((Path(root) / d for d in (ctrls, "cpu,cpuacct", "cpu") if _is_dir(Path(root) / d)), None)
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


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except OSError:  # not searchable by this user
        return False


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
    feed: Callable[[_tables.Builder, dict[str, Any], list[Generation]], None],
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
    workers = _Workers(parts, builder.want, version, source, feed)
    try:
        if not workers.start(data, fd):
            return False
        info["quiet"] = held  # decode_chunk holds its warnings here instead of giving them
        try:
            for chunk in parts[0]:
                feed(builder, info, chunk)
                if progress is not None:
                    progress(chunk[-1].end)
                if release is not None:
                    release(chunk[-1].end)
        except Exception:  # raised again by the one-core read, after its warnings
            return False
        finally:
            del info["quiet"]
        for k in range(1, len(parts)):
            got, mm = workers.result(k)
            if got is not None and _guess_missed(builder, got):
                # rare: read it again, here, from the state the parts before it left
                got = _read_part(
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


# A part's process is a Python of its own, started with subprocess (posix_spawn or vfork:
# none of this process's threads, locks or fork handlers reach it) and kept for the reads to
# come until it has waited this long for one.
IDLE_S = 60.0
WORKER = "from gmpanalysis.gotrace.parallel import serve; serve()"


class _Pool:
    """The parts' processes of this process, one read at a time (a read that finds them busy,
    in another thread, is read on one core)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.lock = threading.Lock()

    def take(self, n: int) -> list[subprocess.Popen] | None:
        if not self.lock.acquire(blocking=False):
            return None
        try:
            self.procs = [p for p in self.procs if p.poll() is None]
            while len(self.procs) < n:
                self.procs.append(_spawn())
        except BaseException:
            self.lock.release()
            raise
        return self.procs[:n]

    def give_back(self, used: list[subprocess.Popen], clean: bool) -> None:
        """After a read; ``clean``: each process answered its part (the others may still be
        working on one: ended)."""
        try:
            if not clean:
                for p in used:
                    _end(p)
                self.procs = [p for p in self.procs if p not in used]
        finally:
            self.lock.release()


POOL = _Pool()


def _spawn() -> subprocess.Popen:
    env = dict(os.environ)
    # the same gmpanalysis, wherever this process found it
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
    return subprocess.Popen(
        [sys.executable, "-c", WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def _end(p: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        p.kill()
    with contextlib.suppress(Exception):
        p.wait()
    for f in (p.stdin, p.stdout):
        with contextlib.suppress(Exception):
            f.close()  # type: ignore[union-attr]


class _Workers:
    """The parts but the first, each given to a process of :data:`POOL`, which writes what it
    built to a memfd of this process."""

    def __init__(
        self,
        parts: list[list[list[Generation]]],
        want: frozenset[str],
        version: int,
        source: str,
        feed: Callable[..., None],
    ) -> None:
        self.parts, self.want, self.version, self.source = parts, want, version, source
        self.keep, self.need = feed.keep, feed.need  # type: ignore[attr-defined]
        self.procs: dict[int, subprocess.Popen] = {}
        self.used: list[subprocess.Popen] | None = None
        self.fds: dict[int, int] = {}
        self.data_fd: int | None = None
        self.answered = 0

    def start(self, data: bytes, fd: int | None) -> bool:
        """Give each part to a process; False when none are free (another thread reads)."""
        from . import kernels

        self.used = POOL.take(len(self.parts) - 1)
        if self.used is None:
            return False
        if fd is None:  # bytes given: the processes read a copy in memory
            fd = self.data_fd = os.memfd_create("gmpanalysis-trace", os.MFD_CLOEXEC)
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(data)
        me = os.getpid()
        for k, p in enumerate(self.used, start=1):
            self.fds[k] = os.memfd_create(f"gmpanalysis-trace-part{k}", os.MFD_CLOEXEC)
            job = {
                "data": f"/proc/{me}/fd/{fd}",
                "out": f"/proc/{me}/fd/{self.fds[k]}",
                "version": self.version,
                "source": self.source,
                "chunks": self.parts[k],
                "warm": self.parts[k - 1][-1][-1],  # the generation before the part
                "want": self.want,
                "keep": self.keep,
                "need": self.need,
                "compiled": kernels.ENABLED,
            }
            # the job through the part's own file: the pipe carries one line, and never blocks
            with os.fdopen(self.fds[k], "wb", closefd=False) as f:
                pickle.dump(job, f, protocol=pickle.HIGHEST_PROTOCOL)
            self.procs[k] = p
            with contextlib.suppress(OSError):  # one gone: its part is read again on one core
                p.stdin.write(f"{job['out']}\n".encode())  # type: ignore[union-attr]
                p.stdin.flush()  # type: ignore[union-attr]
        return True

    def result(self, k: int) -> tuple[dict[str, Any] | None, mmap.mmap | None]:
        """Part k as its process built it (None: it failed, or warned), its arrays views of
        the mapped file given beside it (close it once they are used)."""
        p = self.procs.pop(k)
        try:
            said = p.stdout.readline()  # type: ignore[union-attr]
        except OSError:
            said = b""
        self.answered += said == b"1\n"
        fd = self.fds.pop(k)
        try:
            return _load(fd) if said == b"1\n" else (None, None)
        finally:
            os.close(fd)

    def stop(self) -> None:
        """Free the files and the processes (those still working on a part, after an error or
        an interrupt here, are ended)."""
        for fd in [*self.fds.values(), *([self.data_fd] if self.data_fd is not None else [])]:
            os.close(fd)
        if self.used is not None:
            POOL.give_back(self.used, clean=self.answered == len(self.used))
        self.procs, self.fds, self.data_fd, self.used = {}, {}, None, None


def serve() -> None:  # pragma: no cover (a part's process; what it writes is checked where it is read)
    """A part's process: for each line on stdin (the path of a file holding a job, where it
    also writes what it built), read the part and answer "1" (written) or "0" (failed or
    warned: the trace is then read again on one core); exit after IDLE_S without a job, or
    when stdin closes (the reading process is gone)."""
    import select

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        ready, _, _ = select.select([stdin], [], [], IDLE_S)
        if not ready:
            return
        line = stdin.readline()
        if not line:
            return
        try:
            ok = part_process(line.decode().strip())
        except Exception:
            ok = False
        stdout.write(b"1\n" if ok else b"0\n")
        stdout.flush()
        trim()


def part_process(path: str) -> bool:  # pragma: no cover (see serve)
    """Read the part the job at ``path`` names and write what it built over the job; False
    when reading it failed or warned."""
    from . import kernels

    with open(path, "rb") as f:
        job = pickle.load(f)
    kernels.ENABLED = job["compiled"]
    with open(job["data"], "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    buf = np.frombuffer(data, dtype=np.uint8)
    version, source = job["version"], job["source"]
    feed = feeder(data, buf, version, source, job["keep"], job["need"])
    released = [0]

    def release(offset: int) -> None:  # the pages read: dropped from this process
        end = offset // mmap.PAGESIZE * mmap.PAGESIZE
        if end > released[0]:
            data.madvise(mmap.MADV_DONTNEED, released[0], end - released[0])
            released[0] = end

    with warnings.catch_warnings(record=True) as caught:  # (this process has one thread)
        warnings.simplefilter("always")
        got = _read_part(
            data, buf, version, source, job["chunks"], job["want"], feed, warm=job["warm"], release=release
        )
    del buf
    if got is None or caught:
        return False
    with open(path, "r+b") as out:
        out.truncate(0)
        _dump(out.fileno(), got)
    return True


def feeder(
    data: bytes, buf: np.ndarray, version: int, source: str, keep: np.ndarray, need: np.ndarray
) -> Callable[[_tables.Builder, dict[str, Any], list[Generation]], None]:
    """``feed(builder, info, chunk)``: decode one chunk of whole generations into a builder,
    as the one-core read does (``keep`` and ``need``: the event types and arguments to
    decode, see reader._decode_masks)."""

    def feed(b: _tables.Builder, info: dict[str, Any], chunk: list[Generation]) -> None:
        for decoded in decode_chunk(data, buf, chunk, version, source, info, keep, need):
            b.feed(*decoded)
            del decoded
        b.flush()
        # freed memory back to the system once per chunk: after each piece it cost as much
        # as the read itself in page faults (a 38 MB trace: 1.0 s against 0.6 s), for a
        # peak a few MB lower
        trim()

    feed.keep, feed.need = keep, need  # type: ignore[attr-defined]
    return feed


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
    frequency: int | None = None,
    release: Callable[[int], None] | None = None,
) -> dict[str, Any] | None:
    """One part's builder state, from the threads' states ``start`` and the clock
    ``frequency`` the generations before it left, or those that reading ``warm`` (the
    generation before) alone gives; None if reading it would warn, or failed."""
    held: list[str] = []
    try:
        if start is None:
            w, winfo = _tables.Builder(want), {**new_info(), "quiet": []}
            feed(w, winfo, [warm] if warm is not None else [])
            start, frequency = w.m_state, winfo["frequency"]
            del w
        size = chunks[-1][-1].end - chunks[0][0].start
        b = _tables.Builder(want, size)
        b.m_state = dict(start)
        b.edge = Edge()
        # the clock's frequency as the generations before left it: a trace whose clock is not
        # Linux's warns once, at its first generation, not at each part's
        info = {**new_info(), "m_first": {}, "frequency": frequency, "quiet": held}
        for chunk in chunks:
            feed(b, info, chunk)
            if release is not None:
                release(chunk[-1].end)
    except Exception:  # the one-core read raises it again, where it lies
        return None
    if held:
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
