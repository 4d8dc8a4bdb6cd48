"""Which events the tables read, and what each thread's stream of them gives: the running
intervals, sweeps and goroutine state of a group of whole M streams (the numpy code: every
per-M state forward-filled with array operations, never a loop over events), and the few
events (stop-the-world, assists, logs, labels) with the goroutine each ran on."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from . import spec as s

SCHED = (
    s.EV_PROCSTART,
    s.EV_PROCSTOP,
    s.EV_PROCSTATUS,
    s.EV_GOSTART,
    s.EV_GOSTOP,
    s.EV_GOBLOCK,
    s.EV_GODESTROY,
    s.EV_GOSYSCALLBEGIN,
    s.EV_GOSYSCALLEND,
    s.EV_GOSYSCALLENDBLOCKED,
    s.EV_GOSTATUS,
    s.EV_GOSTATUSSTACK,
    s.EV_GOSWITCH,
    s.EV_GOSWITCHDESTROY,
    s.EV_GOCREATESYSCALL,
    s.EV_GODESTROYSYSCALL,
)
ON_M = (
    s.EV_GOLABEL,
    s.EV_STWBEGIN,
    s.EV_STWEND,
    s.EV_GCMARKASSISTBEGIN,
    s.EV_GCMARKASSISTEND,
    s.EV_GCMARKASSISTACTIVE,
    s.EV_USERLOG,
    s.EV_GCSWEEPBEGIN,
    s.EV_GCSWEEPEND,
    s.EV_GCSWEEPACTIVE,
)
GLOBAL = (s.EV_PROCSCHANGE, s.EV_GCACTIVE, s.EV_GCBEGIN, s.EV_GCEND, s.EV_HEAPALLOC, s.EV_HEAPGOAL)
USED_TYPES = frozenset(SCHED + ON_M + GLOBAL)
# argument positions (after dt) the tables read, per event type
ARGS_USED: dict[int, tuple[int, ...]] = {
    s.EV_PROCSTART: (0,),
    s.EV_PROCSTATUS: (0, 1),
    s.EV_GOSTART: (0, 1),
    s.EV_GOSTATUS: (0, 1, 2),
    s.EV_GOSTATUSSTACK: (0, 1, 2),
    s.EV_GOSWITCH: (0, 1),
    s.EV_GOSWITCHDESTROY: (0, 1),
    s.EV_GOCREATESYSCALL: (0,),
    s.EV_GOLABEL: (0,),
    s.EV_STWBEGIN: (0,),
    s.EV_GCMARKASSISTACTIVE: (0,),
    s.EV_GCSWEEPACTIVE: (0,),
    s.EV_GCSWEEPEND: (0, 1),
    s.EV_USERLOG: (0, 1, 2),
    s.EV_PROCSCHANGE: (0,),
    s.EV_GCACTIVE: (0,),
    s.EV_GCBEGIN: (0,),
    s.EV_GCEND: (0,),
    s.EV_HEAPALLOC: (0,),
    s.EV_HEAPGOAL: (0,),
}


def isin(typ: np.ndarray, ids: tuple[int, ...]) -> np.ndarray:
    """Which events' types (codes below 256) are among ``ids``, by a lookup table."""
    lut = np.zeros(256, dtype=bool)
    lut[list(ids)] = True
    return lut[typ]


def _carry(values: np.ndarray, setter: np.ndarray, mstart: np.ndarray, default: np.ndarray) -> np.ndarray:
    """Value after each event: the value of the last setter at or before it on the same M,
    else ``default`` (per event: the M's state carried in from earlier generations)."""
    idx = np.arange(len(values), dtype=np.int32)
    last = np.maximum.accumulate(np.where(setter, idx, np.int32(-1)))
    ok = last >= mstart
    return np.where(ok, values[np.maximum(last, 0)], default)


def _before(after: np.ndarray, new_m: np.ndarray, default: np.ndarray) -> np.ndarray:
    """Value before each event; at an M's first event, ``default`` (per event)."""
    out = np.empty_like(after)
    out[1:] = after[:-1]
    out[new_m] = default[new_m]
    return out


def _next_index(mask: np.ndarray) -> np.ndarray:
    """For each i, the smallest j > i with mask[j] (len(mask) if none)."""
    n = len(mask)
    idx = np.where(mask, np.arange(n), n)
    nxt = np.minimum.accumulate(idx[::-1])[::-1]
    return np.r_[nxt[1:], n]


# M streams are processed in groups of about this many events: everything per-M is local
# to an M's own stream, so groups of whole streams give the same result with a bounded peak.
GROUP_EVENTS = 100_000
FEW = (s.EV_STWBEGIN, s.EV_STWEND, s.EV_GCMARKASSISTBEGIN, s.EV_GCMARKASSISTEND, s.EV_GCMARKASSISTACTIVE, s.EV_USERLOG)
# the event types each table is built from, among the global and the goroutine-scoped ones
TABLE_TYPES: dict[str, tuple[int, ...]] = {
    "gc": (s.EV_GCACTIVE, s.EV_GCBEGIN, s.EV_GCEND),
    "gomaxprocs": (s.EV_PROCSCHANGE,),
    "heap": (s.EV_HEAPALLOC, s.EV_HEAPGOAL),
    "stw": (s.EV_STWBEGIN, s.EV_STWEND),
    "assist": (s.EV_GCMARKASSISTBEGIN, s.EV_GCMARKASSISTEND, s.EV_GCMARKASSISTACTIVE),
    "logs": (s.EV_USERLOG,),
    "labels": (s.EV_GOLABEL,),
}


class _Layout(NamedTuple):
    """Where each M's stream lies in a chunk's arrays (in M order, each M's events in
    emission order)."""

    n: int  # events
    new_m: np.ndarray  # per event: the first of its M
    gstart: np.ndarray  # first event of each M
    glast: np.ndarray  # last event of each M
    mstart: np.ndarray  # per event: the first event of its M
    m_ids: np.ndarray  # each stream's M
    gid: np.ndarray  # per event: which M (0..) it belongs to


def _layout(M: np.ndarray) -> _Layout:
    n = len(M)
    new_m = np.r_[True, M[1:] != M[:-1]]
    gstart = np.flatnonzero(new_m)  # first event of each M
    mstart = np.maximum.accumulate(np.where(new_m, np.arange(n, dtype=np.int32), np.int32(0)))
    m_ids = M[gstart]
    gid = np.cumsum(new_m) - 1  # which M (0..) each event belongs to
    glast = np.r_[gstart[1:], n] - 1  # last event of each M
    return _Layout(n, new_m, gstart, glast, mstart, m_ids, gid)


def _event_masks(TY: np.ndarray) -> Callable[[int], np.ndarray]:
    """``ev(k)``: which events are of type k, each type's mask computed once."""
    is_: dict[int, np.ndarray] = {}

    def ev(k: int) -> np.ndarray:
        if k not in is_:
            is_[k] = TY == k
        return is_[k]

    return ev


def thread_streams(
    M: np.ndarray,
    T: np.ndarray,
    TY: np.ndarray,
    A0: np.ndarray,
    A1: np.ndarray,
    A2: np.ndarray,
    GEN: np.ndarray,
    strings: dict[tuple[int, int], str],
    init: dict[int, tuple[int, int, int]],
    running: bool = True,
    few_types: tuple[int, ...] = FEW,
) -> dict[str, object]:
    """Running intervals, sweeps and the goroutine-scoped events of whole M streams of one
    chunk (the arrays are in M order, each M's events in emission order). ``init`` holds
    each M's state after its events in earlier chunks: (goroutine bound to it, whether that
    goroutine runs, its P). Intervals and sweeps whose end is not in these streams come
    back with ``done`` False (the caller closes them later). With ``running`` False, only
    what the goroutine-scoped events need (the goroutine on each M) is built."""
    lay = _layout(M)
    ev = _event_masks(TY)
    out, g_before, run_before, p_after, st_run, switch = _thread_state(ev, M, A0, A1, A2, lay, init)
    if running:
        start, si = _running_rows(ev, M, T, A0, A1, GEN, lay, st_run, switch, g_before, run_before, p_after, out)
        _label_rows(ev, M, A0, GEN, lay, start, si, strings, out)
        _p_taken(ev, A1, lay, start | ev(s.EV_GCSWEEPBEGIN), out)
        del start
        _sweep_rows(ev, M, T, A0, A1, lay, p_after, out)
    out["few"] = few_events(T, g_before, TY, A0, A1, A2, M, GEN, strings, few_types)
    return out


def _p_set(ev: Callable[[int], np.ndarray], A1: np.ndarray) -> np.ndarray:
    """The events that set their M's P: ProcStart, ProcStop, or ProcStatus running/syscall
    written by the M itself."""
    status = ev(s.EV_PROCSTATUS) & np.isin(A1, (s.PROC_RUNNING, s.PROC_SYSCALL))
    return ev(s.EV_PROCSTART) | ev(s.EV_PROCSTOP) | status


def _p_taken(ev: Callable[[int], np.ndarray], A1: np.ndarray, lay: _Layout, takes: np.ndarray, out: dict) -> None:
    """Per M: whether an event of its set its P (p_set), and whether a row or sweep took
    the P it came in with before that (p_used), as the compiled pass gives them."""
    idx = np.where(_p_set(ev, A1), np.arange(lay.n), lay.n)
    first_set = np.minimum.reduceat(idx, lay.gstart) if lay.n else np.zeros(0, dtype=np.int64)
    idx = np.where(takes, np.arange(lay.n), lay.n)
    first_take = np.minimum.reduceat(idx, lay.gstart) if lay.n else np.zeros(0, dtype=np.int64)
    out["p_set"] = first_set < lay.n
    out["p_used"] = first_take < first_set


def _thread_state(
    ev: Callable[[int], np.ndarray],
    M: np.ndarray,
    A0: np.ndarray,
    A1: np.ndarray,
    A2: np.ndarray,
    lay: _Layout,
    init: dict[int, tuple[int, int, int]],
) -> tuple[dict[str, object], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each M's state carried along its stream from ``init``: returns each M's state at the
    end of its stream (m_ids, g_end, run_end, p_end), then per event the goroutine bound to
    its M and whether it runs, both before the event, and the P the M holds after it; and
    the GoStatus-running and GoSwitch masks."""
    new_m, mstart = lay.new_m, lay.mstart
    st0 = np.array([init.get(int(m), (-1, 0, -1)) for m in lay.m_ids.tolist()], dtype=np.int64).reshape(-1, 3)
    g0, run0, p0 = st0[lay.gid, 0], st0[lay.gid, 1].astype(np.int8), st0[lay.gid, 2]
    status = ev(s.EV_GOSTATUS) | ev(s.EV_GOSTATUSSTACK)
    on_this_m = A1 == M  # GoStatus: the thread the goroutine is on
    st_run = status & (A2 == s.GO_RUNNING) & on_this_m
    st_sys = status & (A2 == s.GO_SYSCALL) & on_this_m
    del status, on_this_m
    switch = ev(s.EV_GOSWITCH) | ev(s.EV_GOSWITCHDESTROY)
    leave = (
        ev(s.EV_GOSTOP)
        | ev(s.EV_GOBLOCK)
        | ev(s.EV_GODESTROY)
        | ev(s.EV_GOSYSCALLENDBLOCKED)
        | ev(s.EV_GODESTROYSYSCALL)
    )

    # the goroutine bound to the M (running or in a syscall), and whether it runs
    g_set = ev(s.EV_GOSTART) | switch | st_run | st_sys | ev(s.EV_GOCREATESYSCALL) | leave
    g_after = _carry(np.where(leave, -1, A0), g_set, mstart, g0)
    del g_set
    g_before = _before(g_after, new_m, g0)
    run_set = (
        ev(s.EV_GOSTART)
        | switch
        | ev(s.EV_GOSYSCALLEND)
        | st_run
        | st_sys
        | ev(s.EV_GOCREATESYSCALL)
        | leave
        | ev(s.EV_GOSYSCALLBEGIN)
    )
    run_val = (ev(s.EV_GOSTART) | switch | ev(s.EV_GOSYSCALLEND) | st_run).astype(np.int8)
    run_after = _carry(run_val, run_set, mstart, run0)
    run_before = _before(run_after, new_m, run0)
    del run_set, run_val, st_sys, leave
    # the P the M holds: ProcStart, or ProcStatus running/syscall written by the M itself
    p_set = _p_set(ev, A1)
    # (int64 like the compiled code's: a corrupt P id past int32 stays what the file says)
    p_after = _carry(np.where(ev(s.EV_PROCSTOP), -1, A0), p_set, mstart, p0)
    del p_set
    out: dict[str, object] = {
        "m_ids": lay.m_ids,
        "g_end": g_after[lay.glast],
        "run_end": run_after[lay.glast],
        "p_end": p_after[lay.glast],
    }
    return out, g_before, run_before, p_after, st_run, switch


def _running_rows(
    ev: Callable[[int], np.ndarray],
    M: np.ndarray,
    T: np.ndarray,
    A0: np.ndarray,
    A1: np.ndarray,
    GEN: np.ndarray,
    lay: _Layout,
    st_run: np.ndarray,
    switch: np.ndarray,
    g_before: np.ndarray,
    run_before: np.ndarray,
    p_after: np.ndarray,
    out: dict[str, object],
) -> tuple[np.ndarray, np.ndarray]:
    """The running intervals into ``out`` (g, p, m, start, end, done, gen, seq) with each
    M's first stop (first_stop_t) and the row of its last start (last_start_row); returns
    the start mask and the starts' event indices."""
    n, gstart, m_ids = lay.n, lay.gstart, lay.m_ids
    start = ev(s.EV_GOSTART) | switch | ev(s.EV_GOSYSCALLEND) | (st_run & ~((run_before == 1) & (g_before == A0)))
    stop = ev(s.EV_GOSTOP) | ev(s.EV_GOBLOCK) | ev(s.EV_GODESTROY) | ev(s.EV_GOSYSCALLBEGIN) | switch
    si = np.flatnonzero(start)
    nxt_all = _next_index(stop)
    # the first stop of each M: it ends what the M started in earlier chunks
    first_stop = np.where(stop[gstart], gstart, nxt_all[gstart])
    has = first_stop < n
    has[has] = M[first_stop[has]] == m_ids[has]
    out["first_stop_t"] = np.where(has, T[np.minimum(first_stop, n - 1)], -1)
    del stop, first_stop, has
    nxt = nxt_all[si]
    del nxt_all
    closed = nxt < n
    closed[closed] = M[nxt[closed]] == M[si[closed]]
    out["g"] = np.where(ev(s.EV_GOSYSCALLEND)[si], g_before[si], A0[si])
    out["p"] = p_after[si].astype(np.int32)  # the running table's P column (the kernel's too)
    out["m"] = M[si]
    out["start"] = T[si]
    out["end"] = np.where(closed, T[np.minimum(nxt, n - 1)], -1)
    out["done"] = closed
    out["gen"] = GEN[si]
    # order inside a generation: GoStart/GoSwitch carry the goroutine's sequence number,
    # a GoStatus at the generation start comes before them all; unknown (-1) otherwise
    # (per generation, so int32 holds it; a corrupt larger one only loses its order)
    seq = np.where(ev(s.EV_GOSTART)[si] | switch[si], A1[si], np.where(st_run[si], 0, -1))
    out["seq"] = np.clip(seq, -1, (1 << 31) - 1).astype(np.int32)
    del nxt, closed
    # the row of each M's last start (a GoLabel in a later chunk may still name it)
    srow = np.full(len(m_ids), -1, dtype=np.int64)
    if si.size:
        srow[lay.gid[si]] = np.arange(len(si))  # rows are in M order: the last write per M wins
    out["last_start_row"] = srow
    return start, si


def _label_rows(
    ev: Callable[[int], np.ndarray],
    M: np.ndarray,
    A0: np.ndarray,
    GEN: np.ndarray,
    lay: _Layout,
    start: np.ndarray,
    si: np.ndarray,
    strings: dict[tuple[int, int], str],
    out: dict[str, object],
) -> None:
    """GC worker labels into ``out``: a GoLabel names the goroutine the M started just
    before it (label_pos, the row among the starts ``si``; label_names), or, with no start
    before it in this chunk, the M's last start of an earlier one (orphan_labels)."""
    li = np.flatnonzero(ev(s.EV_GOLABEL))
    out["label_pos"], out["label_names"] = np.zeros(0, dtype=np.int64), []
    out["orphan_labels"] = []
    if li.size:
        last_start = np.maximum.accumulate(np.where(start, np.arange(lay.n, dtype=np.int32), np.int32(-1)))[li]
        ok = last_start >= lay.mstart[li]
        names = [strings.get((int(g), int(a)), "") for g, a in zip(GEN[li], A0[li], strict=True)]
        out["label_pos"] = np.searchsorted(si, last_start[ok])
        out["label_names"] = [x for x, k in zip(names, ok.tolist(), strict=True) if k]
        # no start before it in this chunk: it names the M's last start of an earlier one
        out["orphan_labels"] = [
            (int(m), x) for m, x, k in zip(M[li].tolist(), names, ok.tolist(), strict=True) if not k
        ]


def _sweep_rows(
    ev: Callable[[int], np.ndarray],
    M: np.ndarray,
    T: np.ndarray,
    A0: np.ndarray,
    A1: np.ndarray,
    lay: _Layout,
    p_after: np.ndarray,
    out: dict[str, object],
) -> None:
    """The sweeps into ``out`` (sweep), with each M's first sweep end (first_sweep_end: its
    time, swept and reclaimed bytes), which ends what the M began in earlier chunks."""
    n, gstart, m_ids = lay.n, lay.gstart, lay.m_ids
    # sweeps: P-scoped, non-preemptible, so they end on the M they began on
    sweep_end = ev(s.EV_GCSWEEPEND)
    bi = np.flatnonzero(ev(s.EV_GCSWEEPBEGIN) | ev(s.EV_GCSWEEPACTIVE))
    nx_all = _next_index(sweep_end)
    first_end = np.where(sweep_end[gstart], gstart, nx_all[gstart])
    has = first_end < n
    has[has] = M[first_end[has]] == m_ids[has]
    fe = np.minimum(first_end, n - 1)
    out["first_sweep_end"] = (np.where(has, T[fe], -1), A0[fe], A1[fe])
    nx = nx_all[bi]
    ok = nx < n
    ok[ok] = M[nx[ok]] == M[bi[ok]]
    nxc = np.minimum(nx, n - 1)
    out["sweep"] = {
        "p": np.where(ev(s.EV_GCSWEEPACTIVE)[bi], A0[bi], p_after[bi]),
        "m": M[bi],
        "start_ns": T[bi],
        "end_ns": np.where(ok, T[nxc], -1),
        "swept_bytes": np.where(ok, A0[nxc], 0),
        "reclaimed_bytes": np.where(ok, A1[nxc], 0),
        "done": ok,
    }


def few_events(
    T: np.ndarray,
    G: np.ndarray,
    TY: np.ndarray,
    A0: np.ndarray,
    A1: np.ndarray,
    A2: np.ndarray,
    M: np.ndarray,
    GEN: np.ndarray,
    strings: dict[tuple[int, int], str],
    few_types: tuple[int, ...] = FEW,
) -> dict[str, object]:
    """The goroutine-scoped events (few: STW, assists, logs; those of ``few_types``), paired across all threads and
    chunks at the end; ``G`` is the goroutine on the thread just before each event. The
    strings they name are looked up now, while this chunk's string tables are at hand."""
    fi = np.flatnonzero(isin(TY, few_types))
    fty, fgen = TY[fi], GEN[fi]

    def name(mask: np.ndarray, arg: np.ndarray) -> list[str]:
        return [
            strings.get((int(g), int(a)), "") if k else ""
            for k, g, a in zip(mask.tolist(), fgen.tolist(), arg[fi].tolist(), strict=True)
        ]

    return {
        "T": T[fi],
        "G": G[fi],
        "A0": A0[fi],
        "TY": fty,
        "M": M[fi],
        "kind": name((fty == s.EV_STWBEGIN) | (fty == s.EV_GOLABEL), A0),  # an STW's reason, a label
        "category": name(fty == s.EV_USERLOG, A1),
        "message": name(fty == s.EV_USERLOG, A2),
    }
