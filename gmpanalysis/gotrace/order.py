"""Putting a trace's intervals in order and pairing its few events: threads whose clocks
disagree by a little (overlapping intervals of one goroutine settled), forward-filled heap
metrics, begin/end pairs by goroutine (stop-the-world, mark assists) and GC cycles."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a part's process builds rows, never frames (gotrace.partprocs)
    import pandas as pd

from . import spec as s
from .columns import SCHEMAS, rows_frame, typed_frame

CLASH_BLOCK = 1 << 16


def in_time_order(start: np.ndarray, m: np.ndarray, block: int = 1 << 16) -> bool:
    """Rows by start, then thread? (a block at a time: no temporaries the size of a column)"""
    for lo in range(0, len(start) - 1, block):
        s0, s1 = start[lo : lo + block], start[lo + 1 : lo + block + 1]
        n = len(s1)
        if not np.all((s1 > s0[:n]) | ((s1 == s0[:n]) & (m[lo + 1 : lo + n + 1] >= m[lo : lo + n]))):
            return False
    return True


def ffill(a: np.ndarray, before: float, block: int = 1 << 16) -> float:
    """Fill NaN in place with the last value before it (``before`` at the start), a block at
    a time (no temporaries the size of the column); the last value."""
    for lo in range(0, len(a), block):
        x = a[lo : lo + block]
        idx = np.where(np.isnan(x), -1, np.arange(len(x)))
        np.maximum.accumulate(idx, out=idx)
        x[:] = np.where(idx >= 0, x[np.maximum(idx, 0)], before)
        before = float(x[-1])
    return before


def settle(start: np.ndarray, end: np.ndarray, a: np.ndarray, b: np.ndarray, swap: np.ndarray) -> bool:
    """A goroutine runs on one M at a time; when two of its intervals overlap, the clocks of
    two threads disagreed with the order of events. Go's reader orders such events by the
    goroutine's sequence number and moves the later one's time forward; do the same for the
    pairs of rows (``a`` starts first by time; ``swap``: the sequence says ``b`` came first),
    in the order given: the interval that comes second may not start before the first one
    ends. Which pairs overlap is decided on the times before any is moved. In place; True if
    a start moved."""
    clash = np.flatnonzero(start[b] < end[a])
    for k in clash.tolist():  # rare: none in the real traces seen so far
        x, y = (int(b[k]), int(a[k])) if swap[k] else (int(a[k]), int(b[k]))
        start[y] = max(start[y], end[x])
        end[y] = max(end[y], start[y])
    return bool(clash.size)


def consecutive(g: np.ndarray, start: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (a, b) of one goroutine's intervals that follow one another in time (rows
    in any order; by start, then thread, as one chunk would give them)."""
    order = np.lexsort((m, start, g))
    same = np.flatnonzero(g[order][1:] == g[order][:-1])
    return order[same], order[same + 1]


def resolve_overlaps(g: np.ndarray, start: np.ndarray, end: np.ndarray, m: np.ndarray) -> bool:
    """:func:`settle` for every pair of :func:`consecutive` intervals, none swapped by
    sequence number: rows taken together out of time order. In place; True if a start moved."""
    a, b = consecutive(g, start, m)
    return settle(start, end, a, b, np.zeros(len(a), dtype=bool))


def pair_by_g(
    T: np.ndarray,
    G: np.ndarray,
    A0: np.ndarray,
    begin: np.ndarray,
    end: np.ndarray,
    active: np.ndarray | None,
    names: np.ndarray,
    last_ns: int,
    final: bool = True,
    *,
    kind: bool,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Ranges begun and ended by one goroutine, in time order. Those still open close at
    ``last_ns`` if ``final``; else they are left out and the indices of the events that
    opened them come back, to be paired with later events."""
    mask = begin | end | (active if active is not None else False)
    idx = np.flatnonzero(mask)
    idx = idx[np.argsort(T[idx], kind="stable")]
    opened: dict[int, tuple[int, str, int]] = {}
    # the pairs as indices of their begin and end events (numbers, not a tuple per row)
    b_at = np.empty(len(idx), dtype=np.int64)
    e_at = np.empty(len(idx), dtype=np.int64)
    n = 0
    what = np.where(begin[idx], 1, np.where(end[idx], 3, 2)).tolist()
    gs = G[idx].tolist()
    for i, w, g in zip(idx.tolist(), what, gs, strict=True):
        if w == 1:
            opened[g] = (int(T[i]), str(names[i]) if kind else "", i)
        elif w == 2:
            g = int(A0[i])  # GCMarkAssistActive names its goroutine
            opened.setdefault(g, (int(T[i]), "", i))
        elif g in opened:
            b_at[n], e_at[n] = opened.pop(g)[2], i
            n += 1
    still = np.array([i for _, _, i in opened.values()], dtype=np.int64)
    b_at, e_at = b_at[:n], e_at[:n]
    start, stop = T[b_at], T[e_at]
    g_col = np.where(begin[b_at], G[b_at], A0[b_at]) if active is not None else G[b_at]
    names_col = [str(names[i]) for i in b_at.tolist()] if kind else [""] * n
    is_open = np.zeros(n, dtype=bool)
    if final and opened:
        start = np.r_[start, [t0 for t0, _, _ in opened.values()]]
        stop = np.r_[stop, np.full(len(opened), last_ns, dtype=np.int64)]
        g_col = np.r_[g_col, list(opened)]
        names_col += [k for _, k, _ in opened.values()]
        is_open = np.r_[is_open, np.ones(len(opened), dtype=bool)]
    # rows by start, end, kind, goroutine (as the tuples sorted before)
    names_arr = np.array(names_col, dtype=object)
    order = np.lexsort((g_col, names_arr.astype(str) if kind and len(names_arr) else np.zeros(len(start)), stop, start))
    cols = {
        "start_ns": start[order],
        "end_ns": stop[order],
        "kind": names_arr[order],
        "g": g_col[order],
        "open": is_open[order],
    }
    if not kind:
        del cols["kind"]
    return typed_frame(cols, SCHEMAS["stw" if kind else "assist"]), still


def gc_cycles(
    t: np.ndarray, ty: np.ndarray, a0: np.ndarray, last_ns: int, final: bool = True
) -> tuple[pd.DataFrame, int | None]:
    """GC mark phases: GCBegin .. GCEnd, or GCActive (already running when the generation
    began) .. GCEnd. gc_seq is one global counter, so cycles pair in time order. A cycle
    still open closes at ``last_ns`` if ``final``; else the index of the event that opened
    it comes back."""
    rows = []
    cur: tuple[int, int] | None = None
    cur_i: int | None = None
    sel = np.flatnonzero((ty == s.EV_GCBEGIN) | (ty == s.EV_GCEND) | (ty == s.EV_GCACTIVE))
    for i in sel.tolist():
        k = int(ty[i])
        if k == s.EV_GCBEGIN:
            cur, cur_i = (int(a0[i]), int(t[i])), i
        elif k == s.EV_GCACTIVE:
            if cur is None:
                cur, cur_i = (int(a0[i]), int(t[i])), i
        elif cur is not None:
            rows.append((cur[0], cur[1], int(t[i]), False))
            cur = cur_i = None
    if cur is not None and final:
        rows.append((cur[0], cur[1], last_ns, True))
    return rows_frame(rows, ("seq", "start_ns", "end_ns", "open"), "gc"), cur_i
