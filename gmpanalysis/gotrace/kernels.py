"""Compiled loops for the trace reader, when numba is installed (``pip install
gmpanalysis[fast]``); the reader falls back to its numpy code otherwise, with the same
results (the tests run both).

The walk over a batch's events is a chain: where the next event starts depends on the byte
that starts this one. numpy can only take one step of every batch at a time, and a trace's
batches hold up to ~14,000 events, so the numpy walk pays its per-step overhead that many
times per group of generations. A compiled loop pays 10-15 ns per event (a 25 MB trace:
5.2 M events decoded in 0.06 s, the threads' states followed in 0.07 s) and decodes the
varints in the same pass.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from . import spec as _s

# numba is optional; GMP_NO_NUMBA=1 uses the numpy code even where it is installed. It is
# imported, and each loop compiled (or loaded from numba's cache), on first use: importing
# it costs ~0.2 s that commands reading no trace should not pay.
AVAILABLE = not os.environ.get("GMP_NO_NUMBA") and importlib.util.find_spec("numba") is not None
# the reader uses the compiled loops when AVAILABLE and this is set; tests clear it to run
# the numpy code on the same traces
ENABLED = True


def use() -> bool:
    return AVAILABLE and ENABLED


def _compiled(fn: Callable[..., Any], *helpers: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` compiled by numba on its first call. ``helpers`` are the functions of this
    module it calls: numba looks a global name up when it compiles the caller, so there each
    must name a compiled function; they are compiled then (LLVM inlines them into ``fn``:
    measured as fast as one long loop) and stay plain Python here."""

    @functools.cache
    def jitted() -> Callable[..., Any]:
        from numba import njit

        py = fn
        if helpers:
            scope = dict(fn.__globals__)
            scope.update({h.__name__: njit(nogil=True)(h) for h in helpers})
            py = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
        return njit(cache=True, nogil=True)(py)

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        return jitted()(*args)

    return call


def _goroutine_before(
    mi: np.ndarray,
    m: np.ndarray,
    typ: np.ndarray,
    a0: np.ndarray,
    a1: np.ndarray,
    a2: np.ndarray,
    role: np.ndarray,
    state: np.ndarray,
    go_running: int,
    go_syscall: int,
    out: np.ndarray,
) -> None:
    """The goroutine bound to each event's thread just before the event (-1: none), events
    in file order, ``mi`` the thread's dense index and ``state`` each thread's goroutine so
    far (updated in place). ``role`` per event type: 1 binds its first argument (GoStart,
    GoSwitch, GoCreateSyscall), 2 unbinds (GoStop, GoBlock, GoDestroy, ...), 3 a GoStatus
    that binds it when it runs, or is in a syscall, on this thread."""
    for i in range(len(typ)):
        k = mi[i]
        out[i] = state[k]
        r = role[typ[i]]
        if r == 1:
            state[k] = a0[i]
        elif r == 2:
            state[k] = -1
        elif r == 3 and a1[i] == m[i] and (a2[i] == go_running or a2[i] == go_syscall):
            state[k] = a0[i]


goroutine_before = _compiled(_goroutine_before)


# error codes of decode_events, with (offset, value) beside them
OK, BAD_TYPE, PAST_END, VARINT_LONG, VARINT_OVERFLOW, STEP_TOO_BIG, TIME_TOO_BIG, BAD_PROCS = range(8)


def _decode_events(
    data: np.ndarray,
    b_start: np.ndarray,
    b_end: np.ndarray,
    b_ts: np.ndarray,
    b_lim: np.ndarray,
    jump: np.ndarray,
    keep: np.ndarray,
    need: np.ndarray,
    procs_type: int,
    counts: np.ndarray,
    t_first: np.ndarray,
    t_last: np.ndarray,
    o_batch: np.ndarray,
    o_type: np.ndarray,
    o_t: np.ndarray,
    o_a: np.ndarray,
) -> tuple[int, int, int, int, int]:
    """Every event of the batches (file offsets [b_start, b_end)), in file order: each is a
    type byte and uvarints, dt (ticks since the previous event, from the batch's b_ts) then
    its arguments. Fills per batch the event count and the first and last times (ticks);
    per event of a type in ``keep``: batch, type, time, and the first three arguments where
    ``need[j, type]`` (else -1). The output arrays need not be filled beforehand (pages
    never written stay out of memory). Returns (events kept, error code,
    offset (of the event, the varint, or the batch index for PAST_END), unsigned value, signed value)."""
    n = 0
    for b in range(len(b_start)):
        p = b_start[b]
        end = b_end[b]
        t = b_ts[b]
        lim = b_lim[b]
        c = 0
        while p < end:
            at = p
            f = data[p]
            j = jump[f]
            if j == 0:
                return n, BAD_TYPE, at, np.uint64(f), np.int64(0)
            p += 1
            nv = j - 1 if f < 128 else j  # uvarints after the type byte: dt, then the arguments
            k = n if keep[f] else -1
            if k >= len(o_t):  # cannot happen with the caller's room; never write past it
                return n, PAST_END, b, np.uint64(0), np.int64(0)
            if k >= 0:
                o_a[0, k] = -1
                o_a[1, k] = -1
                o_a[2, k] = -1
            for v in range(nv):
                x = np.uint64(0)
                shift = 0
                start = p
                while True:
                    if p >= end:
                        return n, PAST_END, b, np.uint64(0), np.int64(0)
                    byte = data[p]
                    p += 1
                    if p - start == 10 and byte > 1:
                        return n, VARINT_OVERFLOW if byte < 0x80 else VARINT_LONG, start, np.uint64(0), np.int64(0)
                    x |= np.uint64(byte & 0x7F) << np.uint64(shift)
                    if byte < 0x80:
                        break
                    shift += 7
                    if p - start >= 10:
                        return n, VARINT_LONG, start, np.uint64(0), np.int64(0)
                if v == 0:
                    if x > lim:
                        return n, STEP_TOO_BIG, at, x, np.int64(0)
                    t += x
                    if t > lim:
                        return n, TIME_TOO_BIG, at, lim, np.int64(0)
                elif k >= 0 and v <= 3 and need[v - 1, f]:
                    o_a[v - 1, k] = np.int64(x)
            if c == 0:
                t_first[b] = t
            t_last[b] = t
            c += 1
            if k >= 0:
                o_batch[k] = b
                o_type[k] = f
                o_t[k] = t
                if f == procs_type and (o_a[0, k] < 1 or o_a[0, k] >= 2147483648):
                    return n, BAD_PROCS, at, np.uint64(0), o_a[0, k]
                n += 1
        counts[b] = c
    return n, OK, 0, np.uint64(0), np.int64(0)


decode_events = _compiled(_decode_events)


# the event types, as module constants: numba freezes them into the compiled code

GOSTART, GOSWITCH, GOSWITCHDESTROY = _s.EV_GOSTART, _s.EV_GOSWITCH, _s.EV_GOSWITCHDESTROY
GOSTATUS, GOSTATUSSTACK, GOCREATESYSCALL = _s.EV_GOSTATUS, _s.EV_GOSTATUSSTACK, _s.EV_GOCREATESYSCALL
GOSTOP, GOBLOCK, GODESTROY = _s.EV_GOSTOP, _s.EV_GOBLOCK, _s.EV_GODESTROY
GOSYSCALLBEGIN, GOSYSCALLEND = _s.EV_GOSYSCALLBEGIN, _s.EV_GOSYSCALLEND
GOSYSCALLENDBLOCKED, GODESTROYSYSCALL = _s.EV_GOSYSCALLENDBLOCKED, _s.EV_GODESTROYSYSCALL
PROCSTART, PROCSTOP, PROCSTATUS = _s.EV_PROCSTART, _s.EV_PROCSTOP, _s.EV_PROCSTATUS
SWEEPBEGIN, SWEEPACTIVE, SWEEPEND, GOLABEL = _s.EV_GCSWEEPBEGIN, _s.EV_GCSWEEPACTIVE, _s.EV_GCSWEEPEND, _s.EV_GOLABEL
GO_RUNNING, GO_SYSCALL, PROC_RUNNING, PROC_SYSCALL = _s.GO_RUNNING, _s.GO_SYSCALL, _s.PROC_RUNNING, _s.PROC_SYSCALL


def _end_runs(
    k: int,
    t: int,
    pend: np.ndarray,
    nxt: np.ndarray,
    rows: np.ndarray,
    r_done: np.ndarray,
    first_stop_t: np.ndarray,
) -> None:
    """A stop at ``t`` on thread ``k``: it ends every interval open there (a list from
    pend[k] through nxt), and is the thread's first stop if none came before."""
    r = pend[k]
    while r >= 0:
        rows[3, r] = t
        r_done[r] = True
        r = nxt[r]
    pend[k] = -1
    # last, not first: an array's last use under a branch before the loop keeps numba from
    # pruning the reference counts of every array argument (atomic, per call: the loop
    # measured 3x slower)
    if first_stop_t[k] < 0:
        first_stop_t[k] = t


def _start_run(
    nr: int,
    k: int,
    g: int,
    m: int,
    t: int,
    p: int,
    gen: int,
    seq: int,
    rows: np.ndarray,
    r_p: np.ndarray,
    r_gen: np.ndarray,
    r_seq: np.ndarray,
    r_done: np.ndarray,
    pend: np.ndarray,
    nxt: np.ndarray,
    last_start_row: np.ndarray,
) -> int:
    """Row ``nr``: goroutine ``g`` starts running at ``t`` on thread ``m`` (dense index
    ``k``) holding P ``p``, open until a stop on the thread ends it; returns the next row."""
    rows[0, nr] = g
    rows[1, nr] = m
    rows[2, nr] = t
    rows[3, nr] = -1
    r_p[nr] = p
    r_gen[nr] = gen
    r_seq[nr] = seq
    r_done[nr] = False
    nxt[nr] = pend[k]
    pend[k] = nr
    last_start_row[k] = nr
    return nr + 1


def _start_sweep(
    ns: int,
    k: int,
    p: int,
    m: int,
    t: int,
    sweeps: np.ndarray,
    s_done: np.ndarray,
    spend: np.ndarray,
    snxt: np.ndarray,
) -> int:
    """Sweep ``ns`` of P ``p`` begins at ``t`` on thread ``m`` (dense index ``k``), open until
    the thread's next sweep end; returns the next sweep."""
    sweeps[0, ns] = p
    sweeps[1, ns] = m
    sweeps[2, ns] = t
    sweeps[3, ns] = -1
    sweeps[4, ns] = 0
    sweeps[5, ns] = 0
    s_done[ns] = False
    snxt[ns] = spend[k]
    spend[k] = ns
    return ns + 1


def _end_sweeps(
    k: int,
    t: int,
    swept: int,
    reclaimed: int,
    sweeps: np.ndarray,
    s_done: np.ndarray,
    spend: np.ndarray,
    snxt: np.ndarray,
    first_sweep: np.ndarray,
) -> None:
    """A sweep end at ``t`` on thread ``k`` (with the bytes swept and reclaimed): it ends
    every sweep open there, and is the thread's first sweep end if none came before."""
    r = spend[k]
    while r >= 0:
        sweeps[3, r] = t
        sweeps[4, r] = swept
        sweeps[5, r] = reclaimed
        s_done[r] = True
        r = snxt[r]
    spend[k] = -1
    if first_sweep[0, k] < 0:  # last: see _end_runs
        first_sweep[0, k] = t
        first_sweep[1, k] = swept
        first_sweep[2, k] = reclaimed


def _threads(
    mi: np.ndarray,
    m: np.ndarray,
    typ: np.ndarray,
    t: np.ndarray,
    a0: np.ndarray,
    a1: np.ndarray,
    a2: np.ndarray,
    gen: np.ndarray,
    st_g: np.ndarray,
    st_run: np.ndarray,
    st_p: np.ndarray,
    first_stop_t: np.ndarray,
    last_start_row: np.ndarray,
    first_sweep: np.ndarray,
    g_before: np.ndarray,
    rows: np.ndarray,
    r_p: np.ndarray,
    r_gen: np.ndarray,
    r_seq: np.ndarray,
    r_done: np.ndarray,
    label_row: np.ndarray,
    sweeps: np.ndarray,
    s_done: np.ndarray,
    p_known: np.ndarray,
    p_used: np.ndarray,
) -> tuple[int, int, int]:
    """One pass over a chunk's events in file order, each thread's state in st_g (the
    goroutine bound to it), st_run (whether it runs) and st_p (its P), per dense thread
    index ``mi`` and updated in place: the rules of streams.thread_streams, event by event.

    Writes ``g_before`` per event; a running interval per start (rows: g, m, start, end;
    r_p, r_gen, r_seq; r_done once a stop on its thread ends it); per GoLabel event the row
    of its thread's last start in this chunk (-1: none); a sweep per GCSweepBegin/Active
    (sweeps: p, m, start, end, swept, reclaimed; s_done). Per thread: the time of its first
    stop, the row of its last start, its first sweep end (t, swept, reclaimed; t -1: none);
    p_known: whether an event of its set its P; p_used: whether a row or sweep took the P
    it came in with before that. Returns (rows, labels, sweeps)."""
    nm = len(st_g)
    pend = np.full(nm, -1, dtype=np.int64)  # each thread's open intervals: a list through nxt
    spend = np.full(nm, -1, dtype=np.int64)
    nxt = np.empty(len(typ), dtype=np.int64)
    snxt = np.empty(len(typ), dtype=np.int64)
    nr = 0
    nl = 0
    ns = 0
    for i in range(len(typ)):
        k = mi[i]
        f = typ[i]
        g0 = st_g[k]
        run0 = st_run[k]
        g_before[i] = g0
        status = f == GOSTATUS or f == GOSTATUSSTACK
        on_m = status and a1[i] == m[i]
        s_run = on_m and a2[i] == GO_RUNNING
        s_sys = on_m and a2[i] == GO_SYSCALL
        switch = f == GOSWITCH or f == GOSWITCHDESTROY
        leave = f == GOSTOP or f == GOBLOCK or f == GODESTROY or f == GOSYSCALLENDBLOCKED or f == GODESTROYSYSCALL
        # the P first: a row takes the P after its event
        if f == PROCSTART or (f == PROCSTATUS and (a1[i] == PROC_RUNNING or a1[i] == PROC_SYSCALL)):
            st_p[k] = a0[i]
            p_known[k] = True
        elif f == PROCSTOP:
            st_p[k] = -1
            p_known[k] = True
        stop = f == GOSTOP or f == GOBLOCK or f == GODESTROY or f == GOSYSCALLBEGIN or switch
        if stop:
            _end_runs(k, t[i], pend, nxt, rows, r_done, first_stop_t)
        start = f == GOSTART or switch or f == GOSYSCALLEND or (s_run and not (run0 == 1 and g0 == a0[i]))
        if (start or f == SWEEPBEGIN) and not p_known[k]:
            p_used[k] = True
        if start:
            g = g0 if f == GOSYSCALLEND else a0[i]
            if f == GOSTART or switch:
                seq = min(max(a1[i], -1), 2147483647)
            else:
                seq = 0 if s_run else -1
            nr = _start_run(
                nr, k, g, m[i], t[i], st_p[k], gen[i], seq, rows, r_p, r_gen, r_seq, r_done, pend, nxt, last_start_row
            )
        if f == GOLABEL:
            label_row[nl] = last_start_row[k]
            nl += 1
        if f == SWEEPBEGIN or f == SWEEPACTIVE:
            ns = _start_sweep(ns, k, a0[i] if f == SWEEPACTIVE else st_p[k], m[i], t[i], sweeps, s_done, spend, snxt)
        elif f == SWEEPEND:
            _end_sweeps(k, t[i], a0[i], a1[i], sweeps, s_done, spend, snxt, first_sweep)
        # the goroutine bound to the thread, and whether it runs
        if f == GOSTART or switch or s_run or s_sys or f == GOCREATESYSCALL:
            st_g[k] = a0[i]
        elif leave:
            st_g[k] = -1
        if f == GOSTART or switch or f == GOSYSCALLEND or s_run:
            st_run[k] = 1
        elif s_sys or f == GOCREATESYSCALL or leave or f == GOSYSCALLBEGIN:
            st_run[k] = 0
    return nr, nl, ns


threads = _compiled(_threads, _end_runs, _start_run, _start_sweep, _end_sweeps)
