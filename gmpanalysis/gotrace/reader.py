"""read_trace: Go execution trace bytes -> GoTrace tables."""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
import stat
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ClockWarning, NotFoundError, TraceFormatError, TruncatedTraceWarning, UsageError
from ..schema import MAX_NS
from . import kernels, spec
from . import tables as _tables
from .memory import trim
from .streams import ARGS_USED, ON_M, SCHED
from .wire import (
    Batch,
    Generation,
    GenerationSplitter,
    _Short,
    parse_header,
    token_values,
    tokenize,
    walk_events,
)
from .wire import uvarint as _uvarint


def uvarint(data: bytes, pos: int, end: int, source: str) -> tuple[int, int]:
    """A varint inside a batch: running out of bytes there means a corrupt batch."""
    try:
        return _uvarint(data, pos, end, source)
    except _Short:
        raise TraceFormatError(
            f"{source} offset {pos}: a value runs past the end of its batch; the trace is corrupt"
        ) from None


# Generations are decoded in groups of about this many bytes (a generation is about a
# second of the trace: 1.4 MB on a busy server). Decoding a group holds several times its
# size for a moment; the numpy walk (without numba) pays a fixed overhead per step, the
# events in the longest batch of the group, so it prefers bigger groups. Measured on a 25 MB
# trace with the compiled code: 4 MB groups 223 MB peak, 2 MB 188 MB, at the same speed.
CHUNK_BYTES = 2 << 20
# the compiled decoder's unit: a chunk's batches are decoded and built a piece of about
# this many bytes at a time (each thread's batches in file order), so what a piece decodes
# to stays small beside the tables; the rows are put in time order per chunk
PIECE_BYTES = 256 << 10


# Traces of at least this many bytes are read behind a tqdm progress bar on stderr when no
# ``progress`` is given; None (the library's default): never. The command line sets it when
# stderr is a terminal.
PROGRESS_BAR_BYTES: int | None = None
TICKS_PER_S_LINUX = 15_625_000  # nanotime()/64: ticks * 64 are CLOCK_MONOTONIC ns
# Every other runtime clock (Windows and other low-resolution-clock OSes: cputicks/256 with a
# measured CPU frequency) ticks between these; a value outside is a corrupt field, and would
# turn times into nonsense or overflow (0 divides by zero, 1 makes seconds of each tick).
# (Go's own test traces use 10^9, a 1 ns tick.)
FREQ_MIN = 100_000  # a 10 us tick
FREQ_MAX = 1_000_000_000  # a 1 ns tick
# Largest time accepted (schema.MAX_NS: 146 years of CLOCK_MONOTONIC): anything later is a
# corrupt field, and sums and differences of two times stay inside int64.


@dataclasses.dataclass
class GoTrace:
    """A Go execution trace as tables; every time is int64 CLOCK_MONOTONIC ns (Linux).

    ``stw``: start_ns, end_ns, kind, g, open (still running at the end of the trace).
    ``gc``: seq, start_ns, end_ns, open — the concurrent mark phase of each cycle.
    ``gomaxprocs``: t_ns, procs — real changes only.
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
        default_factory=lambda: _tables._frame({}, _tables.SCHEMAS["labels"]), repr=False
    )

    def __repr__(self) -> str:
        m = self.meta
        span = (m["last_ns"] - m["first_ns"]) / 1e9 if m["events"] else 0.0
        return (
            f"GoTrace(go 1.{m['version']}, {m['events']} events, {span:.2f}s, {m['generations']} generations, "
            f"{len(self.gc)} GC, {len(self.stw)} STW, truncated={m['truncated'] is not None})"
        )


def _strings(data: bytes, b: Batch, out: dict[int, str], source: str) -> None:
    p, end = b.start + 1, b.end
    while p < end:
        if data[p] != spec.EV_STRING:
            raise TraceFormatError(f"{source} offset {p}: expected a string entry in the string table")
        sid, p = uvarint(data, p + 1, end, source)
        ln, p = uvarint(data, p, end, source)
        if p + ln > end:
            raise TraceFormatError(f"{source} offset {p}: string runs past its batch")
        out[sid] = bytes(data[p : p + ln]).decode("utf-8", "replace")
        p += ln


def _sync(data: bytes, b: Batch, source: str) -> tuple[int | None, int, list[tuple[int, int, int, int, int]]]:
    """Frequency, its offset, and clock snapshots (ticks, mono ns, wall s, wall ns, offset)
    from a Sync (1.25+) or lone Frequency batch."""
    p, end = b.start, b.end
    freq, freq_at = None, -1
    snaps = []
    if data[p] == spec.EV_SYNC:
        p += 1
    while p < end:
        t = data[p]
        at = p
        if t == spec.EV_FREQUENCY:
            freq, p = uvarint(data, p + 1, end, source)
            freq_at = at
            if not FREQ_MIN <= freq <= FREQ_MAX:
                raise TraceFormatError(
                    f"{source} offset {at} (generation {b.gen}): trace clock frequency {freq} ticks/s is "
                    f"impossible (Linux writes {TICKS_PER_S_LINUX}, a 64 ns tick; any runtime ticks between "
                    f"{FREQ_MIN} and {FREQ_MAX}/s); the trace is corrupt: record or copy it again"
                )
        elif t == spec.EV_CLOCK_SNAPSHOT:
            dt, p = uvarint(data, p + 1, end, source)
            mono, p = uvarint(data, p, end, source)
            sec, p = uvarint(data, p, end, source)
            nsec, p = uvarint(data, p, end, source)
            snaps.append((b.ts + dt, mono, sec, nsec, at))
        else:
            raise TraceFormatError(f"{source} offset {p}: unexpected byte 0x{t:02x} in a sync batch")
    return freq, freq_at, snaps


def _classify(data: bytes, gen: Generation, source: str) -> tuple[list[Batch], dict[int, str], int | None, int, list]:
    events: list[Batch] = []
    strings: dict[int, str] = {0: ""}
    freq, freq_at = None, -1
    snaps: list = []
    for b in gen.batches:
        if b.exp is not None or b.end == b.start:
            continue  # experimental side tables are opaque to this reader
        first = data[b.start]
        if first == spec.EV_STRINGS:
            _strings(data, b, strings, source)
        elif first in (spec.EV_STACKS, spec.EV_CPU_SAMPLES):
            continue
        elif first in (spec.EV_SYNC, spec.EV_FREQUENCY):
            f, f_at, s = _sync(data, b, source)
            if f is not None:
                if freq is not None and f != freq:
                    raise TraceFormatError(
                        f"{source} offset {f_at}: a second trace clock frequency ({f} ticks/s, after {freq}) "
                        f"in generation {gen.gen}; the trace is corrupt"
                    )
                freq, freq_at = f, f_at
            snaps.extend(s)
        else:
            events.append(b)
    return events, strings, freq, freq_at, snaps


def _tick_limit(freq: int) -> int:
    """The largest trace time, in ticks of this frequency, that is at most MAX_NS."""
    return MAX_NS * freq // 1_000_000_000


def _to_ns(t: np.ndarray, freq: np.ndarray | int) -> np.ndarray:
    """Ticks -> ns. Linux ticks are nanotime()/64, so * 64 is exact CLOCK_MONOTONIC ns."""
    if np.all(freq == TICKS_PER_S_LINUX):
        return t * 64
    return (t.astype(np.float64) * (1e9 / np.asarray(freq, dtype=np.float64))).astype(np.int64)


def _check_times(
    dt: np.ndarray,
    b_ts: np.ndarray,
    counts: np.ndarray,
    lim: np.ndarray,  # uint64, per batch
    batches: list[Batch],
    where: tuple[int, np.ndarray, np.ndarray, np.ndarray],
    source: str,
) -> None:
    """Every event time (batch base + running sum of dt, in ticks) must lie in [0, lim] of
    its batch's generation (times past MAX_NS ns).

    dt (uint64, batch-major) and b_ts (uint64) are unsigned on the wire, so times only grow
    along a batch: bounding each term by lim (<= 2^62) keeps the first time past lim at or
    below 2 * lim <= 2^63, where int64 still shows it (as > lim, or negative at exactly
    2^63). Real traces pass on the cheap bound alone. ``where`` = (lo, starts, tok, batch)
    places event k at file offset lo + starts[tok[k]], in batch batch[k].
    """
    lo, starts, tok, ev_batch = where
    big = np.flatnonzero(b_ts > lim)
    if big.size:
        b = batches[int(big[0])]
        raise TraceFormatError(
            f"{source} offset {b.at}: batch start time {b.ts} ticks is beyond any CLOCK_MONOTONIC reading "
            f"({MAX_NS} ns, 146 years of uptime); the trace is corrupt"
        )
    dmax = int(dt.max())
    lmin = int(lim.min())
    if dmax > lmin:
        over = dt > (lim[ev_batch] if lmin != int(lim.max()) else lmin)
        if over.any():
            k = int(np.argmax(over))
            raise TraceFormatError(
                f"{source} offset {lo + int(starts[tok[k]])}: an event's time step of {int(dt[k])} ticks is "
                f"beyond any CLOCK_MONOTONIC reading ({MAX_NS} ns, 146 years of uptime); the trace is corrupt"
            )
    if int(b_ts.max()) + int(counts.max()) * dmax <= lmin:
        return
    dti = dt.view(np.int64)
    t = np.cumsum(dti)
    first = np.cumsum(counts) - counts
    nz = counts > 0
    base = np.zeros(len(counts), dtype=np.int64)
    base[nz] = b_ts[nz].view(np.int64) - (t[first[nz]] - dti[first[nz]])
    t += np.repeat(base, counts)
    bad = np.flatnonzero((t < 0) | (t > np.repeat(lim.view(np.int64), counts)))
    if bad.size:
        k = int(bad[0])
        raise TraceFormatError(
            f"{source} offset {lo + int(starts[tok[k]])}: event time past {int(lim[ev_batch[k]])} ticks "
            f"({MAX_NS} ns, 146 years of CLOCK_MONOTONIC); the trace is corrupt"
        )


def _hold_threads(
    batches: list[Batch],
    nonempty: np.ndarray,
    ns_first: np.ndarray,
    ns_last: np.ndarray,
    m_last: dict[int, int],
    info: dict[str, Any],
) -> np.ndarray | None:
    """A thread's clock never goes back (the runtime bumps each event past the thread's last
    one), so a batch that starts before its thread's last time is corrupt or from a clock
    that jumped. Like Go's reader, hold such events at the thread's last time: every
    interval then ends at or after its start. Returns the per-batch floor (ns), or None
    when nothing needs holding (real traces). Updates ``m_last`` (ns) and records each step
    back in ``info["clock_steps_back"]``."""
    floor = None
    for i, tf, tl in zip(nonempty.tolist(), ns_first.tolist(), ns_last.tolist(), strict=True):
        b = batches[i]
        last = m_last.get(b.m, -1)
        if tf < last:
            if floor is None:
                floor = np.full(len(batches), -1, dtype=np.int64)
            floor[i] = last
            info["clock_steps_back"].append((b.at, b.m, last - tf))
        m_last[b.m] = max(last, tl)
    return floor


def _check_procs(a0: np.ndarray, typ: np.ndarray, where: tuple[int, np.ndarray, np.ndarray], source: str) -> None:
    """GOMAXPROCS (ProcsChange's first argument) is at least 1 and, as the runtime's int32
    P count, below 2^31."""
    pc = np.flatnonzero(typ == spec.EV_PROCSCHANGE)
    bad = pc[(a0[pc] < 1) | (a0[pc] >= 1 << 31)]
    if bad.size:
        lo, starts, tok = where
        raise TraceFormatError(
            f"{source} offset {lo + int(starts[tok[bad[0]]])}: GOMAXPROCS {a0[bad[0]]} in a ProcsChange event "
            "(it is 1 to 2^31-1); the trace is corrupt"
        )


def _new_info() -> dict[str, Any]:
    return {
        "frequency": None,
        "clock_snapshots": [],
        "events": 0,
        "first_ns": None,
        "last_ns": None,
        "clock_steps_back": [],  # (offset of the batch, thread, ns back)
        "m_last": {},  # the last time (ns) of each thread so far: its events never go back
        "generations_seen": 0,
        "generations_decoded": 0,
        "first_generation": None,
    }


def _decode_chunk(
    data: bytes,
    buf: np.ndarray,
    chunk: list[Generation],
    version: int,
    source: str,
    info: dict[str, Any],
    keep: np.ndarray,
    need: np.ndarray,
) -> Iterator[tuple[dict[str, np.ndarray], dict[tuple[int, int], str]]]:
    """Decode every event of a group of whole generations into flat columns (file order):
    m, gen, ts (ns), type, a0..a2 (-1 where unused), mi (the thread's index in m_ids),
    with the generations' strings; in pieces of consecutive batches (see PIECE_BYTES), none
    for batches without events."""
    strings: dict[tuple[int, int], str] = {}
    lo, hi = chunk[0].start, chunk[-1].end
    ev_batches: list[Batch] = []
    b_gen: list[int] = []
    b_freq: list[int] = []
    for g in chunk:
        events, strs, freq, freq_at, snaps = _classify(data, g, source)
        if freq is None:
            raise TraceFormatError(
                f"{source} generation {g.gen} (offsets {g.start}-{g.end}): no frequency/sync batch; "
                "the generation is incomplete (truncated trace?)"
            )
        if freq != TICKS_PER_S_LINUX and info["frequency"] in (None, TICKS_PER_S_LINUX):
            warnings.warn(
                f"{source}: trace clock runs at {freq} ticks/s, not the Linux 15625000: "
                "times are converted by the frequency but are not CLOCK_MONOTONIC",
                ClockWarning,
                stacklevel=5,
            )
        info["frequency"] = freq
        lim = _tick_limit(freq)
        for sid, st in strs.items():
            strings[(g.gen, sid)] = st
        for t, mono, sec, nsec, at in snaps:
            if t > lim or mono > MAX_NS:
                raise TraceFormatError(
                    f"{source} offset {at} (generation {g.gen}): clock snapshot at {t} ticks / {mono} ns "
                    f"is beyond any CLOCK_MONOTONIC reading ({MAX_NS} ns, 146 years of uptime); "
                    "the trace is corrupt"
                )
            info["clock_snapshots"].append(
                {
                    "gen": g.gen,
                    "trace_ns": int(t * 1_000_000_000 // freq),
                    "mono_ns": mono,
                    "wall_sec": sec,
                    "wall_nsec": nsec,
                }
            )
        ev_batches.extend(events)
        b_gen.extend([g.gen] * len(events))
        b_freq.extend([freq] * len(events))
    b_ts = np.array([b.ts for b in ev_batches], dtype=np.uint64)
    freq_b = np.array(b_freq, dtype=np.int64)
    lim_b = np.array([_tick_limit(f) for f in b_freq], dtype=np.uint64)
    big = np.flatnonzero(b_ts > lim_b)
    if big.size:
        bb = ev_batches[int(big[0])]
        raise TraceFormatError(
            f"{source} offset {bb.at}: batch start time {bb.ts} ticks is beyond any CLOCK_MONOTONIC reading "
            f"({MAX_NS} ns, 146 years of uptime); the trace is corrupt"
        )
    info["chunk_first_ns"] = info["chunk_last_ns"] = None
    if kernels.use():
        # the compiled code decodes a piece of about PIECE_BYTES of batches at a time (the
        # builder takes each thread's batches in file order across pieces); the numpy walk
        # steps through all batches of a chunk in lockstep and pays per step: all at once
        size = np.array([b.end - b.start for b in ev_batches], dtype=np.int64)
        piece = np.cumsum(size) // PIECE_BYTES
        cuts = [0, *(np.flatnonzero(piece[1:] != piece[:-1]) + 1).tolist(), len(ev_batches)]
    else:
        cuts = [0, len(ev_batches)]
    for a, z in zip(cuts[:-1], cuts[1:], strict=True):
        if z > a:
            sel = slice(a, z)
            got = _decode_piece(
                buf,
                (lo, hi),
                ev_batches[sel],
                b_ts[sel],
                freq_b[sel],
                lim_b[sel],
                b_gen[sel],
                version,
                source,
                info,
                keep,
                need,
            )
            if got is not None:
                yield got, strings
            del got  # not alive beside the next piece


def _decode_piece(
    buf: np.ndarray,
    span: tuple[int, int],
    ev_batches: list[Batch],
    b_ts: np.ndarray,
    freq_b: np.ndarray,
    lim_b: np.ndarray,
    b_gen: list[int],
    version: int,
    source: str,
    info: dict[str, Any],
    keep: np.ndarray,
    need: np.ndarray,
) -> dict[str, np.ndarray] | None:
    """The events of these batches (of whole generations, or consecutive batches of them)
    as flat columns (see :func:`_decode_chunk`); None when they hold none."""
    decode = _events_compiled if kernels.use() else _events_numpy
    ev = decode(buf, span[0], span[1], ev_batches, b_ts, lim_b, version, keep, need, source)
    counts = ev["counts"]
    n_ev = int(counts.sum())
    info["events"] += n_ev
    if not n_ev:
        return None
    nonempty = np.flatnonzero(counts > 0)
    f_ne = freq_b[nonempty]
    ns_first = _to_ns(ev["t_first"][nonempty].view(np.int64), f_ne)
    ns_last = _to_ns(ev["t_last"][nonempty].view(np.int64), f_ne)
    for key, v, pick in (
        ("first_ns", int(ns_first.min()), min),
        ("last_ns", int(ns_last.max()), max),
        ("chunk_first_ns", int(ns_first.min()), min),
        ("chunk_last_ns", int(ns_last.max()), max),
    ):
        info[key] = v if info[key] is None else pick(info[key], v)
    floor = _hold_threads(ev_batches, nonempty, ns_first, ns_last, info["m_last"], info)
    bsel = ev["batch"]
    ns = _to_ns(ev["t"], int(freq_b[0]) if (freq_b == freq_b[0]).all() else freq_b[bsel])
    if floor is not None:
        ns = np.maximum(ns, floor[bsel])
    cols: dict[str, np.ndarray] = {"a0": ev["a0"], "a1": ev["a1"], "a2": ev["a2"]}
    typ = ev["type"]
    del ev
    b_m = np.array([b.m for b in ev_batches], dtype=np.uint64).view(np.int64)
    cols["m"] = b_m[bsel]
    # each thread as a dense index (for the compiled per-thread loops)
    m_ids, b_mi = np.unique(b_m, return_inverse=True)
    cols["mi"] = b_mi.astype(np.int32)[bsel]
    cols["m_ids"] = m_ids
    cols["gen"] = np.array(b_gen, dtype=np.int32)[bsel]
    cols["ts"] = ns
    cols["type"] = typ
    return cols


def _events_numpy(
    buf: np.ndarray,
    lo: int,
    hi: int,
    ev_batches: list[Batch],
    b_ts: np.ndarray,
    lim_b: np.ndarray,
    version: int,
    keep: np.ndarray,
    need: np.ndarray,
    source: str,
) -> dict[str, np.ndarray]:
    """The events of the batches with array operations: cut the bytes into tokens (every
    byte < 0x80 ends one), walk all batches in lockstep, decode the varints that are used.
    Returns per batch ``counts``, ``t_first``, ``t_last`` (ticks, uint64), and per event
    of a kept type, in file order: ``batch``, ``type``, ``t`` (ticks, int64), ``a0``-``a2``
    (-1 where unused)."""
    starts = tokenize(buf, lo, hi)
    w = walk_events(buf, lo, starts, ev_batches, version, source)
    nb = len(ev_batches)
    counts = np.bincount(w.batch, minlength=nb)
    out: dict[str, np.ndarray] = {
        "counts": counts,
        "t_first": np.zeros(nb, dtype=np.uint64),
        "t_last": np.zeros(nb, dtype=np.uint64),
    }
    if not len(w.tok):
        z = np.zeros(0, dtype=np.int64)
        out.update(batch=z, type=z.astype(np.uint8), t=z, a0=z, a1=z, a2=z)
        return out
    exp = (w.first >= 128).astype(np.int32)
    # dt follows the type byte; an experimental type byte shares its token with dt
    dt = token_values(buf, lo, starts, w.tok + 1 - exp, source, skip_first=exp)
    del exp
    b_first = np.cumsum(counts) - counts
    nonempty = counts > 0
    _check_times(dt, b_ts, counts, lim_b, ev_batches, (lo, starts, w.tok, w.batch), source)
    dt = dt.view(np.int64)
    # event times are running sums of dt from each batch's base time; events are in
    # batch order, so one cumulative sum serves every batch after a per-batch offset
    # (int64 wraps modulo 2^64, which cancels out: each batch's times are exact once
    # _check_times has bounded them)
    cs = np.cumsum(dt)
    offset = np.zeros(nb, dtype=np.int64)
    offset[nonempty] = cs[b_first[nonempty]] - dt[b_first[nonempty]] - b_ts[nonempty].view(np.int64)
    del dt
    out["t_first"][nonempty] = (cs[b_first[nonempty]] - offset[nonempty]).view(np.uint64)
    out["t_last"][nonempty] = (cs[(b_first + counts - 1)[nonempty]] - offset[nonempty]).view(np.uint64)
    sel = np.flatnonzero(keep[w.first])
    bsel = w.batch[sel]
    out["t"] = cs[sel] - offset[bsel]
    del cs
    typ = w.first[sel]
    tok = w.tok[sel]
    del w, sel
    for j in range(3):
        a = np.full(len(tok), -1, dtype=np.int64)
        has = np.flatnonzero(need[j][typ])
        if has.size:
            a[has] = token_values(buf, lo, starts, tok[has] + 2 + j, source).view(np.int64)
        if j == 0:
            _check_procs(a, typ, (lo, starts, tok), source)
        out[f"a{j}"] = a
    out["batch"], out["type"] = bsel, typ
    return out


def _events_compiled(
    buf: np.ndarray,
    lo: int,
    hi: int,
    ev_batches: list[Batch],
    b_ts: np.ndarray,
    lim_b: np.ndarray,
    version: int,
    keep: np.ndarray,
    need: np.ndarray,
    source: str,
) -> dict[str, np.ndarray]:
    """The same as :func:`_events_numpy`, in one compiled pass over the bytes (no token
    index: each varint is read where the last one ended)."""
    nb = len(ev_batches)
    b_start = np.array([b.start for b in ev_batches], dtype=np.int64)
    b_end = np.array([b.end for b in ev_batches], dtype=np.int64)
    # an event is at least 2 bytes (type, dt), but a cut one may be a lone type byte: one
    # start per 2 bytes, rounded up, and one more
    room = (int((b_end - b_start).sum()) + 1) // 2 + 1
    counts = np.zeros(nb, dtype=np.int64)
    t_first = np.zeros(nb, dtype=np.uint64)
    t_last = np.zeros(nb, dtype=np.uint64)
    o_batch = np.empty(room, dtype=np.int32)
    o_type = np.empty(room, dtype=np.uint8)
    o_t = np.empty(room, dtype=np.int64)
    o_a = np.empty((3, room), dtype=np.int64)  # not filled: pages never written stay out of memory
    n, err, at, u, i = kernels.decode_events(
        buf, b_start, b_end, b_ts, lim_b, spec.jump_table(version).astype(np.int32), keep, need,
        spec.EV_PROCSCHANGE, counts, t_first, t_last, o_batch, o_type, o_t, o_a,
    )  # fmt: skip
    if err != kernels.OK:
        _raise_decode_error(err, at, u, i, ev_batches, version, source)
    return {
        "counts": counts,
        "t_first": t_first,
        "t_last": t_last,
        "batch": o_batch[:n].copy(),
        "type": o_type[:n].copy(),
        "t": o_t[:n].copy(),
        "a0": o_a[0, :n].copy(),
        "a1": o_a[1, :n].copy(),
        "a2": o_a[2, :n].copy(),
    }


def _raise_decode_error(err: int, at: int, u: int, i: int, batches: list[Batch], version: int, source: str) -> None:
    """The compiled decoder's error, in the words of the numpy code's."""
    k = kernels
    if err == k.BAD_TYPE:
        msg = f"offset {at}: byte 0x{u:02x} is not an event type of trace version go 1.{version}"
    elif err == k.PAST_END:
        b = batches[at]
        msg = f"offset {b.end}: an event runs past the end of its batch (batch at offset {b.start})"
    elif err == k.VARINT_LONG:
        msg = f"offset {at}: varint longer than 10 bytes"
    elif err == k.VARINT_OVERFLOW:
        msg = f"offset {at}: varint overflows 64 bits"
    elif err == k.STEP_TOO_BIG:
        msg = (
            f"offset {at}: an event's time step of {u} ticks is beyond any CLOCK_MONOTONIC reading "
            f"({MAX_NS} ns, 146 years of uptime)"
        )
    elif err == k.TIME_TOO_BIG:
        msg = f"offset {at}: event time past {u} ticks ({MAX_NS} ns, 146 years of CLOCK_MONOTONIC)"
    else:
        msg = f"offset {at}: GOMAXPROCS {i} in a ProcsChange event (it is 1 to 2^31-1)"
    raise TraceFormatError(f"{source} {msg}; the trace is corrupt")


def _gen_start_ns(data: bytes, g: Generation, source: str) -> int:
    """The earliest batch start of a generation, in ns (its events come at or after it; the
    next generation's batches start after its last event)."""
    freq = None
    for b in g.batches:
        if b.exp is None and b.end > b.start and data[b.start] in (spec.EV_SYNC, spec.EV_FREQUENCY):
            freq = _sync(data, b, source)[0] or freq
    if freq is None:
        raise TraceFormatError(
            f"{source} generation {g.gen} (offsets {g.start}-{g.end}): no frequency/sync batch; "
            "the generation is incomplete (truncated trace?)"
        )
    ts = min((b.ts for b in g.batches if b.exp is None), default=0)
    if ts > _tick_limit(freq):
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
) -> GoTrace:
    """Parse trace bytes; see :func:`read_trace`. ``release(offset)`` is told when
    nothing before ``offset`` will be read again (the file reader drops those pages)."""
    want = _want(tables)
    version = parse_header(data, source)
    splitter = GenerationSplitter(data, version, source)
    buf = np.frombuffer(data, dtype=np.uint8)
    info = _new_info()
    builder = _tables.Builder(want, len(data) if window is None else 0)
    keep, need = _decode_masks(builder)
    chosen = 0

    # (A second thread decoding the next group while this one built the tables was tried:
    # with the compiled decoder it saved no wall time and cost 20-30 % more CPU.)
    for chunk in _chunked(_in_window(splitter, window, data, source, info, release)):
        chosen += len(chunk)
        for decoded in _decode_chunk(data, buf, chunk, version, source, info, keep, need):
            builder.feed(*decoded)
            del decoded
            trim()
        builder.flush()
        if progress is not None:
            progress(chunk[-1].end)
        if release is not None:
            release(chunk[-1].end)
        trim()
    del buf
    truncated_at = splitter.truncated_at
    _warn_damage(source, len(data), truncated_at, info)
    built = builder.finish(info["last_ns"] or 0)
    del builder
    trim()
    if window is not None:
        built = _clip(built, window)
    info["generations_decoded"] = chosen
    meta = _meta(info, version, source, len(data), want, window)
    meta["truncated"] = truncated_at
    return GoTrace(meta=meta, **built)


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
    with _mapped(p) as (data, release):
        yield from _iter_generations(data, str(p), want, release)


def _iter_generations(
    data: bytes | mmap.mmap, source: str, want: frozenset[str], release: Callable[[int], None] | None
) -> Iterator[GoTrace]:
    version = parse_header(data, source)
    splitter = GenerationSplitter(data, version, source)
    buf = np.frombuffer(data, dtype=np.uint8)
    info = _new_info()
    builder = _tables.Builder(want)
    keep, need = _decode_masks(builder)
    held: GoTrace | None = None
    for g in _in_window(splitter, None, data, source, info):
        events = info["events"]
        for decoded in _decode_chunk(data, buf, [g], version, source, info, keep, need):
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
    _warn_damage(source, len(data), splitter.truncated_at, info)
    if held is not None:
        rest = builder.take(info["last_ns"] or 0, final=True)
        for name, df in rest.items():
            if len(df):
                mine = getattr(held, name)
                setattr(held, name, pd.concat([mine, df], ignore_index=True) if len(mine) else df)
        held.meta["truncated"] = splitter.truncated_at
        yield held


def _warn_damage(source: str, size: int, truncated_at: int | None, info: dict[str, Any]) -> None:
    """After a read: a cut in a generation, and threads' clocks that went back."""
    if truncated_at is not None:
        warnings.warn(
            f"{source}: trace ends inside a generation at offset {truncated_at} (of {size} bytes); "
            f"the {info['generations_seen']} complete generation(s) before it were read",
            TruncatedTraceWarning,
            stacklevel=4,
        )
    back = info["clock_steps_back"]
    if back:
        at, m, ns_back = back[0]
        warnings.warn(
            f"{source}: a thread's clock goes back at {len(back)} batch start(s), first at offset {at} "
            f"(thread {m}, by {ns_back} ns); those events were held at the thread's last time. "
            "The runtime never writes this: the trace is damaged there",
            ClockWarning,
            stacklevel=4,
        )


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
) -> GoTrace:
    """Read a Go execution trace (Go 1.22 - 1.27 formats) into :class:`GoTrace` tables.

    Times are the raw wire timestamps × 1e9/frequency: on Linux, CLOCK_MONOTONIC ns in
    steps of 64 ns, with none of the reordering nudges Go's own reader applies.
    A file cut inside a generation yields the complete generations before the cut, a
    :class:`TruncatedTraceWarning` and ``meta["truncated"]`` = the offset; a corrupt or
    unsupported file raises :class:`TraceFormatError` naming the offset.

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
    """
    if window is not None:
        window = _check_window(window)
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return parse_trace(bytes(path_or_bytes), progress=progress, tables=tables, window=window)
    p = _check_path(path_or_bytes)
    with _mapped(p) as (data, release), _bar(p, len(data), progress) as progress:
        return parse_trace(data, source=str(p), progress=progress, tables=tables, window=window, release=release)


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
def _mapped(p: Path) -> Iterator[tuple[bytes | mmap.mmap, Callable[[int], None] | None]]:
    """The file's bytes, mapped (an empty file: b""), and a function that drops the pages
    before an offset from this process once they are read."""
    try:
        f = open(p, "rb")  # noqa: SIM115 (closed below, once mapped)
    except OSError as e:
        raise TraceFormatError(f"{p}: cannot be read ({e.strerror}); check its permissions") from None
    with f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b"", None
            return
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise TraceFormatError(f"{p}: cannot be mapped ({e.strerror}); copy it to a local disk") from None
    released = 0

    def release(offset: int) -> None:
        # the pages are the file's own and clean: dropped, they come back from the page
        # cache if touched again
        nonlocal released
        end = offset // mmap.PAGESIZE * mmap.PAGESIZE
        if end > released:
            mm.madvise(mmap.MADV_DONTNEED, released, end - released)
            released = end

    try:
        yield mm, release
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
