"""Decoding a trace's generations: the batches of each (strings, clock syncs, event
batches), the events of a group of generations into columns (the compiled loops, or the
numpy walk without numba), each thread's clock checked and held where it goes back, and the
format errors, each naming the offset and what is wrong there."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import ClockWarning, TraceFormatError
from ..schema import MAX_NS
from . import kernels, spec
from .wire import (
    Batch,
    Generation,
    batch_uvarint,
    token_values,
    tokenize,
    walk_events,
)

# the compiled decoder's unit: a chunk's batches are decoded and built a piece of about
# this many bytes at a time (each thread's batches in file order), so what a piece decodes
# to stays small beside the tables; the rows are put in time order per chunk
PIECE_BYTES = 256 << 10
TICKS_PER_S_LINUX = 15_625_000  # nanotime()/64: ticks * 64 are CLOCK_MONOTONIC ns


# Every other runtime clock (Windows and other low-resolution-clock OSes: cputicks/256 with a
# measured CPU frequency) ticks between these; a value outside is a corrupt field, and would
# turn times into nonsense or overflow (0 divides by zero, 1 makes seconds of each tick).
# (Go's own test traces use 10^9, a 1 ns tick.)
FREQ_MIN = 100_000  # a 10 us tick
FREQ_MAX = 1_000_000_000  # a 1 ns tick
# Largest time accepted (schema.MAX_NS: 146 years of CLOCK_MONOTONIC): anything later is a
# corrupt field, and sums and differences of two times stay inside int64.


def _strings(data: bytes, b: Batch, out: dict[int, str], source: str) -> None:
    p, end = b.start + 1, b.end
    while p < end:
        if data[p] != spec.EV_STRING:
            raise TraceFormatError(f"{source} offset {p}: expected a string entry in the string table")
        sid, p = batch_uvarint(data, p + 1, end, source)
        ln, p = batch_uvarint(data, p, end, source)
        if p + ln > end:
            raise TraceFormatError(f"{source} offset {p}: string runs past its batch")
        out[sid] = bytes(data[p : p + ln]).decode("utf-8", "replace")
        p += ln


def sync_batch(data: bytes, b: Batch, source: str) -> tuple[int | None, int, list[tuple[int, int, int, int, int]]]:
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
            freq, p = batch_uvarint(data, p + 1, end, source)
            freq_at = at
            if not FREQ_MIN <= freq <= FREQ_MAX:
                raise TraceFormatError(
                    f"{source} offset {at} (generation {b.gen}): trace clock frequency {freq} ticks/s is "
                    f"impossible (Linux writes {TICKS_PER_S_LINUX}, a 64 ns tick; any runtime ticks between "
                    f"{FREQ_MIN} and {FREQ_MAX}/s); the trace is corrupt: record or copy it again"
                )
        elif t == spec.EV_CLOCK_SNAPSHOT:
            dt, p = batch_uvarint(data, p + 1, end, source)
            mono, p = batch_uvarint(data, p, end, source)
            sec, p = batch_uvarint(data, p, end, source)
            nsec, p = batch_uvarint(data, p, end, source)
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
            f, f_at, s = sync_batch(data, b, source)
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


def tick_limit(freq: int) -> int:
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
    first = info.get("m_first")  # a part read beside others: each thread's first batch start
    for i, tf, tl in zip(nonempty.tolist(), ns_first.tolist(), ns_last.tolist(), strict=True):
        b = batches[i]
        last = m_last.get(b.m, -1)
        if first is not None and b.m not in m_last:
            first[b.m] = tf
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


def new_info() -> dict[str, Any]:
    """What the decoder tells of a trace so far (clock, event count, generations), before its first batch."""
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


def decode_chunk(
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
            message = (
                f"{source}: trace clock runs at {freq} ticks/s, not the Linux 15625000: "
                "times are converted by the frequency but are not CLOCK_MONOTONIC"
            )
            if "quiet" in info:  # a part read beside others: held, given once the parts are joined
                info["quiet"].append(message)
            else:
                warnings.warn(message, ClockWarning, stacklevel=5)
        info["frequency"] = freq
        lim = tick_limit(freq)
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
    lim_b = np.array([tick_limit(f) for f in b_freq], dtype=np.uint64)
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
    as flat columns (see :func:`decode_chunk`); None when they hold none."""
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
