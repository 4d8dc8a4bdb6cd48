"""read_trace: Go execution trace bytes -> GoTrace tables."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ClockWarning, NotFoundError, TraceFormatError, TruncatedTraceWarning
from . import spec, tables
from .wire import (
    Batch,
    Generation,
    _Short,
    parse_header,
    split_generations,
    token_values,
    tokenize,
    walk_events,
)
from .wire import uvarint as _uvarint


def uvarint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A varint inside a batch: running out of bytes there means a corrupt batch."""
    try:
        return _uvarint(data, pos, end)
    except _Short:
        raise TraceFormatError(f"offset {pos}: a value runs past the end of its batch; the trace is corrupt") from None


# Generations are decoded in groups of about this many bytes: the token index costs 4 bytes
# per token, so memory stays bounded whatever the file size.
CHUNK_BYTES = 16 << 20
TICKS_PER_S_LINUX = 15_625_000  # nanotime()/64: ticks * 64 are CLOCK_MONOTONIC ns


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
    ``meta``: version, frequency, first_ns, last_ns, generations, clock_snapshots, events,
    truncated (offset or None), source.
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
        sid, p = uvarint(data, p + 1, end)
        ln, p = uvarint(data, p, end)
        if p + ln > end:
            raise TraceFormatError(f"{source} offset {p}: string runs past its batch")
        out[sid] = bytes(data[p : p + ln]).decode("utf-8", "replace")
        p += ln


def _sync(data: bytes, b: Batch, source: str) -> tuple[int | None, list[tuple[int, int, int, int]]]:
    """Frequency and clock snapshots from a Sync (1.25+) or lone Frequency batch."""
    p, end = b.start, b.end
    freq = None
    snaps = []
    if data[p] == spec.EV_SYNC:
        p += 1
    while p < end:
        t = data[p]
        if t == spec.EV_FREQUENCY:
            freq, p = uvarint(data, p + 1, end)
        elif t == spec.EV_CLOCK_SNAPSHOT:
            dt, p = uvarint(data, p + 1, end)
            mono, p = uvarint(data, p, end)
            sec, p = uvarint(data, p, end)
            nsec, p = uvarint(data, p, end)
            snaps.append((b.ts + dt, mono, sec, nsec))
        else:
            raise TraceFormatError(f"{source} offset {p}: unexpected byte 0x{t:02x} in a sync batch")
    return freq, snaps


def _classify(data: bytes, gen: Generation, source: str) -> tuple[list[Batch], dict[int, str], int | None, list]:
    events: list[Batch] = []
    strings: dict[int, str] = {0: ""}
    freq = None
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
            f, s = _sync(data, b, source)
            freq = f if f is not None else freq
            snaps.extend(s)
        else:
            events.append(b)
    return events, strings, freq, snaps


def _chunks(gens: list[Generation]) -> list[list[Generation]]:
    out: list[list[Generation]] = []
    for g in gens:
        if out and g.end - out[-1][0].start <= CHUNK_BYTES:
            out[-1].append(g)
        else:
            out.append([g])
    return out


def _decode(
    data: bytes,
    buf: np.ndarray,
    gens: list[Generation],
    version: int,
    source: str,
    progress: Callable[[int], None] | None,
) -> tuple[dict[str, np.ndarray], dict[tuple[int, int], str], dict]:
    """Decode every event of the generations into flat columns (file order)."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("m", "gen", "ts", "type", "a0", "a1", "a2")}
    strings: dict[tuple[int, int], str] = {}
    info: dict[str, Any] = {"frequency": None, "clock_snapshots": [], "events": 0, "first_ns": None, "last_ns": None}
    keep_types = np.zeros(256, dtype=bool)
    keep_types[list(tables.USED_TYPES)] = True
    # decode only the arguments the tables use
    need_arg = np.zeros((3, 256), dtype=bool)
    for eid, idx in tables.ARGS_USED.items():
        need_arg[list(idx), eid] = True
    for chunk in _chunks(gens):
        lo, hi = chunk[0].start, chunk[-1].end
        starts = tokenize(buf, lo, hi)
        ev_batches: list[Batch] = []
        b_gen: list[int] = []
        b_freq: list[int] = []
        for g in chunk:
            events, strs, freq, snaps = _classify(data, g, source)
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
                    stacklevel=4,
                )
            info["frequency"] = freq
            for sid, s in strs.items():
                strings[(g.gen, sid)] = s
            info["clock_snapshots"].extend(
                {
                    "gen": g.gen,
                    "trace_ns": int(t * 1_000_000_000 // freq),
                    "mono_ns": mono,
                    "wall_sec": sec,
                    "wall_nsec": nsec,
                }
                for t, mono, sec, nsec in snaps
            )
            ev_batches.extend(events)
            b_gen.extend([g.gen] * len(events))
            b_freq.extend([freq] * len(events))
        w = walk_events(buf, lo, starts, ev_batches, version, source)
        n_ev = len(w.tok)
        info["events"] += n_ev
        if not n_ev:
            continue
        exp = (w.first >= 128).astype(np.int32)
        # dt follows the type byte; an experimental type byte shares its token with dt
        dt = token_values(buf, lo, starts, w.tok + 1 - exp, skip_first=exp).view(np.int64)
        del exp
        # event times are running sums of dt from each batch's base time; events are in
        # batch order, so one cumulative sum serves every batch after a per-batch offset
        cs = np.cumsum(dt)
        counts = np.bincount(w.batch, minlength=len(ev_batches))
        b_first = np.cumsum(counts) - counts
        nonempty = counts > 0
        b_ts = np.array([b.ts for b in ev_batches], dtype=np.uint64).view(np.int64)
        offset = np.zeros(len(ev_batches), dtype=np.int64)
        offset[nonempty] = cs[b_first[nonempty]] - dt[b_first[nonempty]] - b_ts[nonempty]
        del dt
        f0 = b_freq[0]
        first_t = int((cs[b_first[nonempty]] - offset[nonempty]).min())
        last_t = int((cs[(b_first + counts - 1)[nonempty]] - offset[nonempty]).max())
        for key, v, pick in (("first_ns", first_t, min), ("last_ns", last_t, max)):
            v = v * 64 if f0 == TICKS_PER_S_LINUX else int(v * 1e9 / f0)
            info[key] = v if info[key] is None else pick(info[key], v)
        sel = np.flatnonzero(keep_types[w.first])
        bsel = w.batch[sel]
        t = cs[sel] - offset[bsel]
        del cs
        freq_b = np.array(b_freq, dtype=np.int64)
        if (freq_b == TICKS_PER_S_LINUX).all():
            ns = t * 64  # nanotime()/64 ticks: exact CLOCK_MONOTONIC ns
        else:
            ns = (t.astype(np.float64) * (1e9 / freq_b[bsel])).astype(np.int64)
        del t
        typ = w.first[sel]
        tok = w.tok[sel]
        del w, sel
        for j in range(3):
            a = np.full(len(tok), -1, dtype=np.int64)
            has = np.flatnonzero(need_arg[j][typ])
            if has.size:
                a[has] = token_values(buf, lo, starts, tok[has] + 2 + j).view(np.int64)
            cols[f"a{j}"].append(a)
        cols["m"].append(np.array([b.m for b in ev_batches], dtype=np.uint64).view(np.int64)[bsel])
        cols["gen"].append(np.array(b_gen, dtype=np.int32)[bsel])
        cols["ts"].append(ns)
        cols["type"].append(typ)
        del tok, bsel, starts
        if progress is not None:
            progress(hi)
    # one column at a time, releasing its pieces: all columns at once would hold the decoded
    # events twice
    flat: dict[str, np.ndarray] = {}
    for k in list(cols):
        parts = cols.pop(k)
        flat[k] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8 if k == "type" else np.int64)
        del parts
    return flat, strings, info


def parse_trace(data: bytes, *, source: str = "<bytes>", progress: Callable[[int], None] | None = None) -> GoTrace:
    """Parse trace bytes; see :func:`read_trace`."""
    version = parse_header(data, source)
    gens, truncated_at = split_generations(data, version, source)
    if truncated_at is not None:
        warnings.warn(
            f"{source}: trace ends inside a generation at offset {truncated_at} (of {len(data)} bytes); "
            f"the {len(gens)} complete generation(s) before it were read",
            TruncatedTraceWarning,
            stacklevel=3,
        )
    buf = np.frombuffer(data, dtype=np.uint8)
    cols, strings, info = _decode(data, buf, gens, version, source, progress)
    first_ns, last_ns = info["first_ns"] or 0, info["last_ns"] or 0
    built = tables.build(cols, strings, last_ns)
    meta = {
        "source": source,
        "version": version,
        "header": f"go 1.{version} trace",
        "frequency": info["frequency"],
        "events": info["events"],
        "first_ns": first_ns,
        "last_ns": last_ns,
        "generations": len(gens),
        "first_generation": gens[0].gen if gens else None,
        "clock_snapshots": info["clock_snapshots"],
        "truncated": truncated_at,
        "bytes": len(data),
    }
    return GoTrace(meta=meta, **built)


def read_trace(
    path_or_bytes: str | os.PathLike[str] | bytes, *, progress: Callable[[int], None] | None = None
) -> GoTrace:
    """Read a Go execution trace (Go 1.22 - 1.27 formats) into :class:`GoTrace` tables.

    Times are the raw wire timestamps × 1e9/frequency: on Linux, CLOCK_MONOTONIC ns in
    steps of 64 ns, with none of the reordering nudges Go's own reader applies.
    A file cut inside a generation yields the complete generations before the cut, a
    :class:`TruncatedTraceWarning` and ``meta["truncated"]`` = the offset; a corrupt or
    unsupported file raises :class:`TraceFormatError` naming the offset.
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return parse_trace(bytes(path_or_bytes), progress=progress)
    p = Path(path_or_bytes)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"{p}: no such file; give the path of a Go execution trace (trace.out)") from None
    except IsADirectoryError:
        raise TraceFormatError(f"{p}: is a directory; give the trace file in it (e.g. {p / 'trace.out'})") from None
    return parse_trace(data, source=str(p), progress=progress)
