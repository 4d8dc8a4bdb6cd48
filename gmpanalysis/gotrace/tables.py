"""Decoded event columns -> GoTrace tables (intervals, ranges, metrics).

Every event is emitted by a thread (M), and an M's own stream is authoritative for what it
ran: a goroutine runs on an M from a start event (GoStart, GoSwitch, GoSyscallEnd, or a
GoStatus "running" at a generation start) to the next stop event on the same M. The state
an M carries (its P, its goroutine, whether that goroutine runs) is forward-filled along
each M's stream with array operations, never with a loop over events. STW, GC cycles and
mark assists are few and paired in plain Python.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

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


# column dtypes of every table (documented on GoTrace)
SCHEMAS: dict[str, dict[str, str]] = {
    "running": {
        "g": "int64",
        "p": "int32",
        "m": "int64",
        "start_ns": "int64",
        "end_ns": "int64",
        "label": "category",
        "open": "bool",
    },
    "sweep": {
        "p": "int64",
        "m": "int64",
        "start_ns": "int64",
        "end_ns": "int64",
        "swept_bytes": "int64",
        "reclaimed_bytes": "int64",
        "open": "bool",
    },
    "stw": {"start_ns": "int64", "end_ns": "int64", "kind": "object", "g": "int64", "open": "bool"},
    "assist": {"g": "int64", "start_ns": "int64", "end_ns": "int64", "open": "bool"},
    "logs": {"t_ns": "int64", "g": "int64", "m": "int64", "task": "int64", "category": "object", "message": "object"},
    "gc": {"seq": "int64", "start_ns": "int64", "end_ns": "int64", "open": "bool"},
}


def _rows_frame(rows: list[tuple], names: tuple[str, ...], table: str) -> pd.DataFrame:
    """A table from row tuples whose fields are ``names`` (in that order)."""
    cols = dict(zip(names, zip(*rows, strict=True), strict=True)) if rows else {}
    return _frame(cols, SCHEMAS[table])


def _isin(typ: np.ndarray, ids: tuple[int, ...]) -> np.ndarray:
    lut = np.zeros(256, dtype=bool)
    lut[list(ids)] = True
    return lut[typ]


def _carry(values: np.ndarray, setter: np.ndarray, mstart: np.ndarray, default: int = -1) -> np.ndarray:
    """Value after each event: the value of the last setter at or before it on the same M."""
    idx = np.arange(len(values), dtype=np.int32)
    last = np.maximum.accumulate(np.where(setter, idx, np.int32(-1)))
    ok = last >= mstart
    return np.where(ok, values[np.maximum(last, 0)], default)


def _before(after: np.ndarray, new_m: np.ndarray, default: int = -1) -> np.ndarray:
    out = np.empty_like(after)
    out[0] = default
    out[1:] = after[:-1]
    out[new_m] = default
    return out


def _next_index(mask: np.ndarray) -> np.ndarray:
    """For each i, the smallest j > i with mask[j] (len(mask) if none)."""
    n = len(mask)
    idx = np.where(mask, np.arange(n), n)
    nxt = np.minimum.accumulate(idx[::-1])[::-1]
    return np.r_[nxt[1:], n]


def _frame(cols: dict[str, object], dtypes: dict[str, str]) -> pd.DataFrame:
    """A frame with exactly these columns and dtypes, built from arrays that already have
    them (pandas' astype on many small frames dominated the cost of short traces)."""
    return pd.DataFrame(
        {
            k: pd.Categorical(cols.get(k, ())) if t == "category" else np.asarray(cols.get(k, ()), dtype=t)
            for k, t in dtypes.items()
        },
        copy=False,
    )


# M streams are processed in groups of about this many events: everything per-M is local
# to an M's own stream, so groups of whole streams give the same result with a bounded peak.
GROUP_EVENTS = 400_000
FEW = (s.EV_STWBEGIN, s.EV_STWEND, s.EV_GCMARKASSISTBEGIN, s.EV_GCMARKASSISTEND, s.EV_GCMARKASSISTACTIVE, s.EV_USERLOG)


def _streams(
    M: np.ndarray,
    T: np.ndarray,
    TY: np.ndarray,
    A0: np.ndarray,
    A1: np.ndarray,
    A2: np.ndarray,
    GEN: np.ndarray,
    strings: dict[tuple[int, int], str],
    last_ns: int,
) -> dict[str, object]:
    """Running intervals, sweeps and the goroutine-scoped events of whole M streams (the
    arrays are in M order, each M's events in emission order)."""
    n = len(M)
    new_m = np.r_[True, M[1:] != M[:-1]]
    mstart = np.maximum.accumulate(np.where(new_m, np.arange(n, dtype=np.int32), np.int32(0)))
    is_: dict[int, np.ndarray] = {}

    def ev(k: int) -> np.ndarray:
        if k not in is_:
            is_[k] = TY == k
        return is_[k]

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
    g_before = _before(_carry(np.where(leave, -1, A0), g_set, mstart), new_m)
    del g_set
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
    run_before = _before(_carry(run_val, run_set, mstart, 0), new_m, 0)
    del run_set, run_val, st_sys, leave
    # the P the M holds: ProcStart, or ProcStatus running/syscall written by the M itself
    p_set = (
        ev(s.EV_PROCSTART) | ev(s.EV_PROCSTOP) | (ev(s.EV_PROCSTATUS) & np.isin(A1, (s.PROC_RUNNING, s.PROC_SYSCALL)))
    )
    p_after = _carry(np.where(ev(s.EV_PROCSTOP), -1, A0).astype(np.int32), p_set, mstart)
    del p_set

    start = ev(s.EV_GOSTART) | switch | ev(s.EV_GOSYSCALLEND) | (st_run & ~((run_before == 1) & (g_before == A0)))
    del run_before
    stop = ev(s.EV_GOSTOP) | ev(s.EV_GOBLOCK) | ev(s.EV_GODESTROY) | ev(s.EV_GOSYSCALLBEGIN) | switch
    si = np.flatnonzero(start)
    nxt = _next_index(stop)[si]
    del stop
    closed = nxt < n
    closed[closed] = M[nxt[closed]] == M[si[closed]]
    end_t = np.where(closed, T[np.minimum(nxt, n - 1)], last_ns)
    del nxt
    out: dict[str, object] = {
        "g": np.where(ev(s.EV_GOSYSCALLEND)[si], g_before[si], A0[si]),
        "p": p_after[si],
        "m": M[si],
        "start": T[si],
        "end": end_t,
        "open": ~closed,
        "gen": GEN[si],
        # order inside a generation: GoStart/GoSwitch carry the goroutine's sequence number,
        # a GoStatus at the generation start comes before them all; unknown (-1) otherwise
        "seq": np.where(ev(s.EV_GOSTART)[si] | switch[si], A1[si], np.where(st_run[si], 0, -1)),
    }
    # GC worker labels: a GoLabel names the goroutine the M started just before it
    li = np.flatnonzero(ev(s.EV_GOLABEL))
    out["label_pos"], out["label_names"] = np.zeros(0, dtype=np.int64), []
    if li.size:
        last_start = np.maximum.accumulate(np.where(start, np.arange(n, dtype=np.int32), np.int32(-1)))[li]
        ok = last_start >= mstart[li]
        out["label_pos"] = np.searchsorted(si, last_start[ok])
        out["label_names"] = [strings.get((int(g), int(a)), "") for g, a in zip(GEN[li[ok]], A0[li[ok]], strict=True)]
    del start

    # sweeps: P-scoped, non-preemptible, so they end on the M they began on
    bi = np.flatnonzero(ev(s.EV_GCSWEEPBEGIN) | ev(s.EV_GCSWEEPACTIVE))
    nx = _next_index(ev(s.EV_GCSWEEPEND))[bi]
    ok = nx < n
    ok[ok] = M[nx[ok]] == M[bi[ok]]
    nxc = np.minimum(nx, n - 1)
    out["sweep"] = {
        "p": np.where(ev(s.EV_GCSWEEPACTIVE)[bi], A0[bi], p_after[bi]),
        "m": M[bi],
        "start_ns": T[bi],
        "end_ns": np.where(ok, T[nxc], last_ns),
        "swept_bytes": np.where(ok, A0[nxc], 0),
        "reclaimed_bytes": np.where(ok, A1[nxc], 0),
        "open": ~ok,
    }
    # goroutine-scoped events (few), paired across all Ms later
    fi = np.flatnonzero(_isin(TY, FEW))
    out["few"] = {
        "T": T[fi],
        "G": g_before[fi],
        "GEN": GEN[fi],
        "A0": A0[fi],
        "A1": A1[fi],
        "A2": A2[fi],
        "TY": TY[fi],
        "M": M[fi],
    }
    return out


def _cat(parts: list[dict], key: str) -> np.ndarray:
    return np.concatenate([p[key] for p in parts])


def build(c: dict[str, np.ndarray], strings: dict[tuple[int, int], str], last_ns: int) -> dict[str, object]:
    """Build every table; ranges still open at the end of the trace close at ``last_ns``.
    Consumes ``c`` (its columns are released as they are used)."""

    # --- global events (few) --------------------------------------------------------------
    gsel = np.flatnonzero(_isin(c["type"], GLOBAL))
    gsel = gsel[np.argsort(c["ts"][gsel], kind="stable")]
    glob = (c["ts"][gsel], c["type"][gsel], c["a0"][gsel])

    # --- per-M streams, in groups of whole streams ----------------------------------------
    sel = np.flatnonzero(_isin(c["type"], SCHED + ON_M))
    order = sel[np.argsort(c["m"][sel], kind="stable")]  # file order within each M
    del sel
    m_sorted = c["m"][order]
    bounds = np.flatnonzero(np.r_[True, m_sorted[1:] != m_sorted[:-1]])  # first event of each M
    del m_sorted
    cuts = [0]
    for b in bounds.tolist():  # one entry per thread: few
        if b - cuts[-1] >= GROUP_EVENTS:
            cuts.append(b)
    cuts.append(len(order))
    parts = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        if b <= a:
            continue
        idx = order[a:b]
        parts.append(
            _streams(
                c["m"][idx],
                c["ts"][idx],
                c["type"][idx],
                c["a0"][idx],
                c["a1"][idx],
                c["a2"][idx],
                c["gen"][idx],
                strings,
                last_ns,
            )
        )
    del order
    for k in ("m", "ts", "type", "a0", "a1", "a2", "gen"):
        c.pop(k, None)

    out: dict[str, object] = {name: _frame({}, SCHEMAS[name]) for name in ("running", "sweep", "stw", "assist", "logs")}
    if parts:
        sizes = [len(p["g"]) for p in parts]
        offs = np.r_[0, np.cumsum(sizes)]
        names = [x for p in parts for x in p["label_names"]]
        categories = sorted(set(names) | {""})
        lookup = {name: i for i, name in enumerate(categories)}
        codes = np.zeros(int(offs[-1]), dtype=np.int16)
        if names:
            pos = np.concatenate([p["label_pos"] + o for p, o in zip(parts, offs[:-1], strict=True)])
            codes[pos] = [lookup[x] for x in names]
        g, start_t, end_t = _cat(parts, "g"), _cat(parts, "start"), _cat(parts, "end")
        _resolve_overlaps(g, _cat(parts, "gen"), _cat(parts, "seq"), start_t, end_t)
        m = _cat(parts, "m")
        by_time = np.lexsort((m, start_t))
        out["running"] = pd.DataFrame(
            {
                "g": g[by_time],
                "p": _cat(parts, "p")[by_time],
                "m": m[by_time],
                "start_ns": start_t[by_time],
                "end_ns": end_t[by_time],
                "label": pd.Categorical.from_codes(codes[by_time], categories=categories),
                "open": _cat(parts, "open")[by_time],
            },
            copy=False,
        )
        del g, start_t, end_t, m, by_time, codes
        sw = {k: np.concatenate([p["sweep"][k] for p in parts]) for k in SCHEMAS["sweep"]}
        out["sweep"] = _frame(sw, SCHEMAS["sweep"]).sort_values("start_ns", kind="stable", ignore_index=True)
        few = {k: np.concatenate([p["few"][k] for p in parts]) for k in parts[0]["few"]}
        T, G, GEN, A0, A1, A2, TY, M = (few[k] for k in ("T", "G", "GEN", "A0", "A1", "A2", "TY", "M"))
        out["stw"] = _pair_by_g(
            T, G, GEN, A0, TY == s.EV_STWBEGIN, TY == s.EV_STWEND, None, strings, last_ns, kind=True
        )
        out["assist"] = _pair_by_g(
            T,
            G,
            GEN,
            A0,
            TY == s.EV_GCMARKASSISTBEGIN,
            TY == s.EV_GCMARKASSISTEND,
            TY == s.EV_GCMARKASSISTACTIVE,
            strings,
            last_ns,
            kind=False,
        )
        lg = np.flatnonzero(TY == s.EV_USERLOG)
        lg = lg[np.argsort(T[lg], kind="stable")]
        out["logs"] = _frame(
            {
                "t_ns": T[lg],
                "g": G[lg],
                "m": M[lg],
                "task": A0[lg],
                "category": [strings.get((int(g), int(a)), "") for g, a in zip(GEN[lg], A1[lg], strict=True)],
                "message": [strings.get((int(g), int(a)), "") for g, a in zip(GEN[lg], A2[lg], strict=True)],
            },
            SCHEMAS["logs"],
        )

    # --- global events -------------------------------------------------------------------
    gt, gty, ga0 = glob
    pc = gty == s.EV_PROCSCHANGE
    procs_t, procs_v = gt[pc], ga0[pc]
    keep = np.r_[True, procs_v[1:] != procs_v[:-1]] if len(procs_v) else np.zeros(0, dtype=bool)
    out["gomaxprocs"] = _frame({"t_ns": procs_t[keep], "procs": procs_v[keep]}, {"t_ns": "int64", "procs": "int64"})
    out["gc"] = _gc_cycles(gt, gty, ga0, last_ns)
    hm = (gty == s.EV_HEAPALLOC) | (gty == s.EV_HEAPGOAL)
    heap = pd.DataFrame(
        {
            "t_ns": gt[hm],
            "heap_alloc_bytes": np.where(gty[hm] == s.EV_HEAPALLOC, ga0[hm], np.nan),
            "heap_goal_bytes": np.where(gty[hm] == s.EV_HEAPGOAL, ga0[hm], np.nan),
        }
    )
    out["heap"] = heap.ffill()
    return out


def _resolve_overlaps(g: np.ndarray, gen: np.ndarray, seq: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
    """A goroutine runs on one M at a time; when two of its intervals overlap, the clocks of
    two threads disagreed with the order of events. Go's reader orders such events by the
    goroutine's sequence number and moves the later one's time forward; do the same: the
    interval that comes second may not start before the first one ends. In place."""
    order = np.lexsort((start, g))
    gs, st, en = g[order], start[order], end[order]
    clash = np.flatnonzero((gs[1:] == gs[:-1]) & (st[1:] < en[:-1])) + 1
    for k in clash.tolist():  # rare: none in the real traces seen so far
        a, b = order[k - 1], order[k]  # a starts first by time
        if gen[a] == gen[b] and seq[a] >= 0 and seq[b] >= 0 and seq[b] < seq[a]:
            a, b = b, a  # the sequence says b's interval came first
        start[b] = max(start[b], end[a])
        end[b] = max(end[b], start[b])


def _pair_by_g(
    T: np.ndarray,
    G: np.ndarray,
    GEN: np.ndarray,
    A0: np.ndarray,
    begin: np.ndarray,
    end: np.ndarray,
    active: np.ndarray | None,
    strings: dict[tuple[int, int], str],
    last_ns: int,
    *,
    kind: bool,
) -> pd.DataFrame:
    mask = begin | end | (active if active is not None else False)
    idx = np.flatnonzero(mask)
    idx = idx[np.argsort(T[idx], kind="stable")]
    opened: dict[int, tuple[int, str]] = {}
    rows = []
    for i in idx.tolist():
        if begin[i]:
            g = int(G[i])
            opened[g] = (int(T[i]), strings.get((int(GEN[i]), int(A0[i])), "") if kind else "")
        elif active is not None and active[i]:
            g = int(A0[i])  # GCMarkAssistActive names its goroutine
            opened.setdefault(g, (int(T[i]), ""))
        else:
            g = int(G[i])
            if g in opened:
                t0, k = opened.pop(g)
                rows.append((t0, int(T[i]), k, g, False))
    rows.extend((t0, last_ns, k, g, True) for g, (t0, k) in opened.items())
    rows.sort()
    names = ("start_ns", "end_ns", "kind", "g", "open")
    if kind:
        return _rows_frame(rows, names, "stw")
    return _rows_frame(rows, names, "assist")


def _gc_cycles(t: np.ndarray, ty: np.ndarray, a0: np.ndarray, last_ns: int) -> pd.DataFrame:
    """GC mark phases: GCBegin .. GCEnd, or GCActive (already running when the generation
    began) .. GCEnd. gc_seq is one global counter, so cycles pair in time order."""
    rows = []
    cur: tuple[int, int] | None = None
    sel = np.flatnonzero((ty == s.EV_GCBEGIN) | (ty == s.EV_GCEND) | (ty == s.EV_GCACTIVE))
    for i in sel.tolist():
        k = int(ty[i])
        if k == s.EV_GCBEGIN:
            cur = (int(a0[i]), int(t[i]))
        elif k == s.EV_GCACTIVE:
            if cur is None:
                cur = (int(a0[i]), int(t[i]))
        elif cur is not None:
            rows.append((cur[0], cur[1], int(t[i]), False))
            cur = None
    if cur is not None:
        rows.append((cur[0], cur[1], last_ns, True))
    return _rows_frame(rows, ("seq", "start_ns", "end_ns", "open"), "gc")
