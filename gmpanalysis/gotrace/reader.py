"""read_trace: Go execution trace bytes -> GoTrace tables."""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import GmpError, NotFoundError, TraceFormatError, UsageError
from ..schema import MAX_NS
from . import parallel as _parallel
from . import spec
from . import tables as _tables
from .damage import damage_meta, warn_damage
from .decode import (
    TICKS_PER_S_LINUX,
    decode_chunk,
    new_info,
    sync_batch,
    tick_limit,
)
from .memory import PageDropper, trim
from .part import Feeder
from .streams import ARGS_USED, ON_M, SCHED
from .wire import (
    Generation,
    GenerationSplitter,
    parse_header,
)

# Generations are decoded in groups of about this many bytes (a generation is about a
# second of the trace: 1.4 MB on a busy server). Decoding a group holds several times its
# size for a moment; the numpy walk (without numba) pays a fixed overhead per step, the
# events in the longest batch of the group, so it prefers bigger groups. Measured on a 25 MB
# trace with the compiled code: 4 MB groups 223 MB peak, 2 MB 188 MB, at the same speed.
CHUNK_BYTES = 2 << 20


# Traces of at least this many bytes are read behind a tqdm progress bar on stderr when no
# ``progress`` is given; None (the library's default): never. The command line sets it when
# stderr is a terminal.
PROGRESS_BAR_BYTES: int | None = None


@dataclasses.dataclass
class GoTrace:
    """A Go execution trace as tables; every time is int64 CLOCK_MONOTONIC ns (Linux).

    ``stw``: start_ns, end_ns, kind, g, open (still running at the end of the trace).
    ``gc``: seq, start_ns, end_ns, open — the concurrent mark phase of each cycle.
    ``gomaxprocs``: t_ns, procs — real changes only, after a first row with the value in
    force where the read begins (the trace's start; with a window, the start of the first
    generation read, where the runtime states it again: the change itself may lie before).
    ``running``: g, p, m, start_ns, end_ns, label, open — one row per interval a goroutine
    ran; label is the GC worker label ("GC (dedicated)", ...) or "".
    ``assist``: g, start_ns, end_ns, open — GC mark assists.
    ``sweep``: p, m, start_ns, end_ns, swept_bytes, reclaimed_bytes, open.
    ``heap``: t_ns, heap_alloc_bytes, heap_goal_bytes.
    ``logs``: t_ns, g, m, task, category, message — runtime/trace.Log calls.
    ``labels``: t_ns, g, m, label — goroutine labels (the runtime's GoLabel: a GC worker's
    mode, "GC (dedicated)" and the like, each time it starts one).
    ``meta``: version, frequency, first_ns, last_ns, generations, clock_snapshots, events,
    truncated (offset or None), clock_steps_back (batches whose thread clock went back and
    were held, see :class:`ClockWarning`; 0 in an undamaged trace), source.
    """

    stw: pd.DataFrame
    gc: pd.DataFrame
    gomaxprocs: pd.DataFrame
    running: pd.DataFrame
    assist: pd.DataFrame
    sweep: pd.DataFrame
    heap: pd.DataFrame
    logs: pd.DataFrame
    meta: dict[str, Any]
    labels: pd.DataFrame = dataclasses.field(
        default_factory=lambda: _tables.typed_frame({}, _tables.SCHEMAS["labels"]), repr=False
    )

    def __repr__(self) -> str:
        m = self.meta
        span = (m["last_ns"] - m["first_ns"]) / 1e9 if m["events"] else 0.0
        return (
            f"GoTrace(go 1.{m['version']}, {m['events']} events, {span:.2f}s, {m['generations']} generations, "
            f"{len(self.gc)} GC, {len(self.stw)} STW, truncated={m['truncated'] is not None})"
        )


def _gen_start_ns(data: bytes, g: Generation, source: str) -> int:
    """The earliest batch start of a generation, in ns (its events come at or after it; the
    next generation's batches start after its last event)."""
    freq = None
    for b in g.batches:
        if b.exp is None and b.end > b.start and data[b.start] in (spec.EV_SYNC, spec.EV_FREQUENCY):
            freq = sync_batch(data, b, source)[0] or freq
    if freq is None:
        raise TraceFormatError(
            f"{source} generation {g.gen} (offsets {g.start}-{g.end}): no frequency/sync batch; "
            "the generation is incomplete (truncated trace?)"
        )
    ts = min((b.ts for b in g.batches if b.exp is None), default=0)
    if ts > tick_limit(freq):
        raise TraceFormatError(
            f"{source} offset {g.start} (generation {g.gen}): batch start time {ts} ticks is beyond any "
            f"CLOCK_MONOTONIC reading ({MAX_NS} ns, 146 years of uptime); the trace is corrupt"
        )
    return ts * 64 if freq == TICKS_PER_S_LINUX else ts * 1_000_000_000 // freq


def _in_window(
    gens: Iterable[Generation],
    window: tuple[int, int] | None,
    data: bytes,
    source: str,
    info: dict[str, Any],
    release: Callable[[int], None] | None = None,
) -> Iterator[Generation]:
    """The generations to decode: all, or for ``window`` (ns) those that overlap it and one
    more on each side. A generation overlaps when its first batch starts by t1 and the next
    one's starts at t0 or later; but a thread the quota froze can still be writing the old
    generation when the others begin the next (up to ~200 ms later in the shipped lab runs),
    so the generation before holds events in the window too, and the one after holds the
    ends of what is still running at t1. Counts every generation in ``info``; the pages of
    the skipped ones are released."""
    if window is None:
        for g in gens:
            info["generations_seen"] += 1
            if info["first_generation"] is None:
                info["first_generation"] = g.gen
            yield g
        return
    t0, t1 = window

    def overlaps(lo: int, next_lo: int | None) -> bool:
        return lo <= t1 and (next_lo is None or next_lo >= t0)

    pending: list[tuple[Generation, int]] = []  # read, not decided: a decision looks two ahead
    before = False  # whether the generation before the next one to decide overlaps

    def decide(final: bool) -> Iterator[Generation]:
        nonlocal before
        while len(pending) >= 3 or (final and pending):
            (g, lo), rest = pending[0], pending[1:]
            here = overlaps(lo, rest[0][1] if rest else None)
            after = bool(rest) and overlaps(rest[0][1], rest[1][1] if len(rest) > 1 else None)
            if before or here or after:
                if info["first_generation"] is None:
                    info["first_generation"] = g.gen
                yield g
            elif release is not None:
                release(g.end)
            before = here
            pending.pop(0)

    for g in gens:
        info["generations_seen"] += 1
        pending.append((g, _gen_start_ns(data, g, source)))
        yield from decide(final=False)
    yield from decide(final=True)


def _clip(built: dict[str, Any], window: tuple[int, int]) -> dict[str, Any]:
    """Rows that overlap the window [t0, t1] (ns); the GOMAXPROCS value in force at t0 is
    kept as a row at its own time."""
    t0, t1 = window
    out = dict(built)
    for name in ("stw", "gc", "running", "assist", "sweep"):
        df = built[name]
        out[name] = df[(df.end_ns >= t0) & (df.start_ns <= t1)].reset_index(drop=True)
    for name in ("heap", "logs", "labels"):
        df = built[name]
        out[name] = df[(df.t_ns >= t0) & (df.t_ns <= t1)].reset_index(drop=True)
    gp = built["gomaxprocs"]
    before = np.flatnonzero(gp.t_ns.to_numpy() < t0)
    keep = (gp.t_ns >= t0) & (gp.t_ns <= t1)
    if before.size:
        keep.iloc[before[-1]] = True
    out["gomaxprocs"] = gp[keep].reset_index(drop=True)
    return out


def _chunked(gens: Iterable[Generation]) -> Iterator[list[Generation]]:
    """Whole generations in groups of about CHUNK_BYTES, in file order."""
    cur: list[Generation] = []
    for g in gens:
        if cur and g.end - cur[0].start > CHUNK_BYTES:
            yield cur
            cur = []
        cur.append(g)
    if cur:
        yield cur


TABLES = ("stw", "gc", "gomaxprocs", "running", "assist", "sweep", "heap", "logs", "labels")


def _want(tables_: Iterable[str] | None) -> frozenset[str]:
    if tables_ is None:
        return frozenset(TABLES)
    if isinstance(tables_, str):
        tables_ = (tables_,)
    try:
        want = frozenset(tables_)
    except TypeError:
        raise UsageError(
            f"read_trace(tables={tables_!r}): give table names, e.g. ('stw', 'gc'); choose from {list(TABLES)}"
        ) from None
    unknown = sorted(want - set(TABLES))
    if unknown:
        raise UsageError(f"read_trace(tables=...): unknown table(s) {unknown}; choose from {list(TABLES)}")
    return want


def parse_trace(
    data: bytes,
    *,
    source: str = "<bytes>",
    progress: Callable[[int], None] | None = None,
    tables: Iterable[str] | None = None,
    window: tuple[int, int] | None = None,
    release: Callable[[int], None] | None = None,
    workers: int | None = None,
    fd: int | None = None,
) -> GoTrace:
    """Parse trace bytes; see :func:`read_trace`. ``release(offset)`` is told when
    nothing before ``offset`` will be read again (the file reader drops those pages);
    ``fd`` is an open file descriptor of the file ``data`` maps (processes reading parts of
    it open it; without it, the bytes are copied to memory they can open)."""
    want = _want(tables)
    workers = _check_workers(workers)
    version = parse_header(data, source)
    splitter = GenerationSplitter(data, version, source)
    buf = np.frombuffer(data, dtype=np.uint8)
    info = new_info()
    builder = _tables.Builder(want, len(data) if window is None else 0)
    keep, need = _decode_masks(builder)

    feed = Feeder(data, buf, version, source, keep, need)
    if progress is not None:  # never backwards (a read in parts given up is read again from the start)
        progress = _monotonic(progress)

    chunks: Iterable[list[Generation]] = _chunked(_in_window(splitter, window, data, source, info, release))
    done = False
    if window is None and _parallel.wanted(workers, len(data)):
        try:
            chunks = list(chunks)
        except GmpError:  # the one-core read meets it after the generations before it
            splitter, info = GenerationSplitter(data, version, source), new_info()
            chunks = _chunked(_in_window(splitter, window, data, source, info, release))
            parts = []
        else:
            parts = _parallel.plan(chunks, workers or _parallel.workers(), asked=workers is not None)
        if len(parts) > 1:
            if isinstance(release, PageDropper):  # the reader's own mapping of the file
                # finding the generations touched every page; they would stay in this
                # process's resident size while the other parts are read elsewhere
                release.drop_all()
            seen = {k: info[k] for k in ("generations_seen", "first_generation")}
            done = _parallel.read(data, buf, version, source, parts, builder, info, feed, progress, release, fd)
            if not done:  # read again on one core: its warnings and errors are the trace's
                builder, info = _tables.Builder(want, len(data)), {**new_info(), **seen}
    chosen = 0
    # (A second thread decoding the next group while this one built the tables was tried:
    # with the compiled decoder it saved no wall time and cost 20-30 % more CPU.)
    for chunk in chunks:
        chosen += len(chunk)
        if done:
            continue
        feed(builder, info, chunk)
        if progress is not None:
            progress(chunk[-1].end)
        if release is not None:
            release(chunk[-1].end)
    warn_damage(source, len(data), splitter, info)
    built = builder.finish(info["last_ns"] or 0)
    del builder
    trim()
    if window is not None:
        built = _clip(built, window)
    info["generations_decoded"] = chosen
    meta = _meta(info, version, source, len(data), want, window)
    meta.update(damage_meta(splitter))
    return GoTrace(meta=meta, **built)


def _monotonic(progress: Callable[[int], None]) -> Callable[[int], None]:
    most = [-1]

    def told(offset: int) -> None:
        if offset > most[0]:
            most[0] = offset
            progress(offset)

    return told


def _check_workers(workers: object) -> int | None:
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise UsageError(f"read_trace(workers={workers!r}): give a number of processes, 1 or more (None: one per CPU)")
    return int(workers)


def iter_generations(
    path_or_bytes: str | os.PathLike[str] | bytes, *, tables: Iterable[str] | None = None
) -> Iterator[GoTrace]:
    """Read a trace one generation at a time (about a second of it each), for aggregating
    as you go: memory holds one generation's events and what is still open.

    Yields a :class:`GoTrace` per generation with the rows that ended in it: an interval
    (or STW, assist, sweep, GC cycle) that crosses a generation boundary comes once, with
    its true start, in the generation where it ends; what is still open when the trace
    ends comes with the last one, flagged ``open``. So the rows of all the yielded tables
    together are those of :func:`read_trace` (up to row order; two intervals of one
    goroutine that overlap on disagreeing thread clocks are put in order only within one
    generation's rows). ``meta`` holds the generation's number (``generation``), its
    event count and the times of its first and last event (``first_ns``, ``last_ns``).
    """
    want = _want(tables)
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        yield from _iter_generations(bytes(path_or_bytes), "<bytes>", want, None)
        return
    p = _check_path(path_or_bytes)
    with _mapped(p) as (data, release, _):
        yield from _iter_generations(data, str(p), want, release)


def _iter_generations(
    data: bytes | mmap.mmap, source: str, want: frozenset[str], release: Callable[[int], None] | None
) -> Iterator[GoTrace]:
    version = parse_header(data, source)
    splitter = GenerationSplitter(data, version, source)
    buf = np.frombuffer(data, dtype=np.uint8)
    info = new_info()
    builder = _tables.Builder(want)
    keep, need = _decode_masks(builder)
    held: GoTrace | None = None
    for g in _in_window(splitter, None, data, source, info):
        events = info["events"]
        for decoded in decode_chunk(data, buf, [g], version, source, info, keep, need):
            builder.feed(*decoded)
            del decoded
        if release is not None:
            release(g.end)
        got = builder.take(info["last_ns"] or 0)
        meta = _meta(info, version, source, len(data), want, None)
        meta.update(
            generation=g.gen,
            events=info["events"] - events,
            first_ns=info["chunk_first_ns"] if info["events"] > events else None,
            last_ns=info["chunk_last_ns"] if info["events"] > events else None,
        )
        if held is not None:
            yield held
        held = GoTrace(meta=meta, **got)
    del buf
    warn_damage(source, len(data), splitter, info)
    if held is not None:
        rest = builder.take(info["last_ns"] or 0, final=True)
        for name, df in rest.items():
            if len(df):
                mine = getattr(held, name)
                setattr(held, name, pd.concat([mine, df], ignore_index=True) if len(mine) else df)
        held.meta.update(damage_meta(splitter))
        yield held


def _meta(
    info: dict[str, Any], version: int, source: str, size: int, want: frozenset[str], window: tuple[int, int] | None
) -> dict[str, Any]:
    return {
        "source": source,
        "version": version,
        "header": f"go 1.{version} trace",
        "frequency": info["frequency"],
        "events": info["events"],
        "first_ns": info["first_ns"] or 0,
        "last_ns": info["last_ns"] or 0,
        "generations": info["generations_seen"],
        "first_generation": info["first_generation"],
        "generations_decoded": info["generations_decoded"],
        "clock_snapshots": info["clock_snapshots"],
        "truncated": None,
        "zero_tail": None,
        "unclosed": None,
        "clock_steps_back": len(info["clock_steps_back"]),
        "bytes": size,
        "tables": tuple(t for t in TABLES if t in want),
        "window": None if window is None else (int(window[0]), int(window[1])),
    }


def _decode_masks(builder: _tables.Builder) -> tuple[np.ndarray, np.ndarray]:
    """The event types to decode, and which of their arguments, for the tables asked for."""
    types = set(builder.glob_types) | set(builder.heap_types)
    if builder.running:
        types |= set(SCHED + ON_M)
    elif builder.threads:  # the goroutine on each thread, and the goroutine-scoped events
        types |= set(np.flatnonzero(_tables.ROLE).tolist()) | set(builder.few_types)
    keep = np.zeros(256, dtype=bool)
    keep[sorted(types)] = True
    need = np.zeros((3, 256), dtype=bool)
    for eid, idx in ARGS_USED.items():
        if eid in types:
            need[list(idx), eid] = True
    return keep, need


def read_trace(
    path_or_bytes: str | os.PathLike[str] | bytes,
    *,
    progress: Callable[[int], None] | None = None,
    tables: Iterable[str] | None = None,
    window: tuple[int, int] | None = None,
    workers: int | None = None,
) -> GoTrace:
    """Read a Go execution trace (Go 1.22 - 1.27 formats) into :class:`GoTrace` tables.

    Times are the raw wire timestamps × 1e9/frequency: on Linux, CLOCK_MONOTONIC ns in
    steps of 64 ns, with none of the reordering nudges Go's own reader applies.
    A file cut inside a generation yields the complete generations before the cut, a
    :class:`TruncatedTraceWarning` and ``meta["truncated"]`` = the offset. Zero bytes to the
    end of the file where they break its framing (what a crash leaves of data that never
    reached the disk) end it: ``meta["zero_tail"]`` = where they begin, the warning too, and
    ``meta["truncated"]`` where they begin inside a batch (where a batch would begin, the
    generations before are whole, as at a clean end of the file). A last generation the
    runtime never closed (the process stopped without trace.Stop: its string and stack
    tables, and from Go 1.26 its end marker, never written) is left out, with the warning,
    ``meta["truncated"]`` at the end of the file and ``meta["unclosed"]`` = {"generation",
    "offset"} where it begins. A corrupt or unsupported file raises
    :class:`TraceFormatError` naming the offset.

    The file is read a group of generations at a time (a piece of its batches at a time with
    the compiled code), mapped rather than copied; it must not shrink while it is read.
    Memory is the tables plus one piece's events: the rows are written, as they are found,
    into the columns the tables are made of.
    ``tables`` names the tables to build (default: all of :data:`TABLES`); the others come
    back empty and cost nothing to build (``stw``, ``assist``, ``logs`` and ``labels`` still follow
    every thread's goroutine; ``gc``, ``gomaxprocs`` and ``heap`` alone do not).
    ``window=(t0_ns, t1_ns)`` decodes only the generations that overlap it, found from their
    batch headers, and one more on each side (a frozen thread writes a generation's last
    events late; the next one ends what runs at t1), and keeps the rows that overlap the
    window (and the GOMAXPROCS value in force at t0); ``meta["generations_decoded"]`` says
    how many were decoded. A goroutine already running when the first of them began starts
    there (its status is restated at each generation), not at its true start.

    A whole trace of more than a few MB is read by ``workers`` processes at once (Linux; by
    default one per CPU this process may use, its cgroup's CPU limit counted), each building
    a part of its generations; the tables are those a one-core read gives (``workers=1``).
    """
    if window is not None:
        window = _check_window(window)
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return parse_trace(bytes(path_or_bytes), progress=progress, tables=tables, window=window, workers=workers)
    p = _check_path(path_or_bytes)
    with _mapped(p) as (data, release, fd), _bar(p, len(data), progress) as progress:
        return parse_trace(
            data,
            source=str(p),
            progress=progress,
            tables=tables,
            window=window,
            release=release,
            workers=workers,
            fd=fd,
        )


@contextlib.contextmanager
def _bar(p: Path, size: int, progress: Callable[[int], None] | None) -> Iterator[Callable[[int], None] | None]:
    """``progress``, or a tqdm bar's update for a big trace (see PROGRESS_BAR_BYTES)."""
    if progress is not None or PROGRESS_BAR_BYTES is None or size < PROGRESS_BAR_BYTES:
        yield progress
        return
    from tqdm import tqdm

    done = [0]
    with tqdm(total=size, unit="B", unit_scale=True, desc=p.name, leave=False) as bar:

        def update(offset: int) -> None:
            bar.update(offset - done[0])
            done[0] = offset

        yield update


@contextlib.contextmanager
def _mapped(p: Path) -> Iterator[tuple[bytes | mmap.mmap, Callable[[int], None] | None, int | None]]:
    """The file's bytes, mapped (an empty file: b""), a function that drops the pages
    before an offset from this process once they are read, and the open file's descriptor
    (processes reading parts of the trace open the same file through it, even one renamed
    or replaced meanwhile)."""
    try:
        f = open(p, "rb")  # noqa: SIM115 (closed below)
    except OSError as e:
        raise TraceFormatError(f"{p}: cannot be read ({e.strerror}); check its permissions") from None
    with f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b"", None, None
            return
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise TraceFormatError(f"{p}: cannot be mapped ({e.strerror}); copy it to a local disk") from None
        try:
            yield mm, PageDropper(mm), f.fileno()
        finally:
            try:
                mm.close()
            except BufferError:
                pass  # an error's traceback still holds a view of it: unmapped when that goes


def _check_window(window: object) -> tuple[int, int]:
    try:
        t0, t1 = window  # type: ignore[misc]
        t0, t1 = int(t0), int(t1)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"read_trace(window=...): give (t0_ns, t1_ns), two integers, not {window!r}") from None
    if t1 < t0:
        raise UsageError(f"read_trace(window=({t0}, {t1})): the window ends before it starts")
    return t0, t1


def _check_path(path: str | os.PathLike[str]) -> Path:
    """The trace file's path, if it names a regular file; else the error that says why not."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise NotFoundError(f"{p}: no such file; give the path of a Go execution trace (trace.out)") from None
    except OSError as e:  # a symlink loop, a path through a file, no search permission...
        raise TraceFormatError(f"{p}: cannot be opened ({e.strerror}); give the path of a trace file") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceFormatError(f"{p}: is a directory; give the trace file in it (e.g. {p / 'trace.out'})")
    if not stat.S_ISREG(st.st_mode):
        # opening a FIFO blocks until a writer comes; a device like /dev/zero never ends
        raise TraceFormatError(
            f"{p}: not a regular file (a FIFO, socket or device); save the trace to a file and give that"
        )
    return p
