"""Compiled loops for the trace reader, when numba is installed (``pip install
gmpanalysis[fast]``); the reader falls back to its numpy code otherwise, with the same
results (the tests run both).

The walk over a batch's events is a chain: where the next event starts depends on the byte
that starts this one. numpy can only take one step of every batch at a time, and a trace's
batches hold up to ~14,000 events, so the numpy walk pays its per-step overhead that many
times per group of generations; a compiled loop pays about a nanosecond per event.
"""

from __future__ import annotations

import os

import numpy as np

njit = None
if not os.environ.get("GMP_NO_NUMBA"):  # numba is optional; GMP_NO_NUMBA=1 uses the numpy code
    try:
        from numba import njit
    except ImportError:  # pragma: no cover - depends on the environment
        pass

AVAILABLE = njit is not None
# the reader uses the compiled loops when AVAILABLE and this is set; tests clear it to run
# the numpy code on the same traces
ENABLED = True


def use() -> bool:
    return AVAILABLE and ENABLED


def _walk(
    seg_first: np.ndarray,
    starts: np.ndarray,
    jump: np.ndarray,
    cur: np.ndarray,
    end_tok: np.ndarray,
    out_tok: np.ndarray,
    out_batch: np.ndarray,
    out_first: np.ndarray,
) -> tuple[int, int, int, int]:
    """Walk every batch's events in order. Returns (events found, error, token, batch):
    error 0 none, 1 a byte that is no event type at that token, 2 an event that runs past
    the end of that batch."""
    n = 0
    for b in range(len(cur)):
        k = cur[b]
        e = end_tok[b]
        while k < e:
            f = seg_first[starts[k]]
            j = jump[f]
            if j == 0:
                return n, 1, k, b
            out_tok[n] = k
            out_batch[n] = b
            out_first[n] = f
            n += 1
            k += j
        if k > e:
            return n, 2, k, b
    return n, 0, 0, 0


walk = njit(cache=True, nogil=True)(_walk) if AVAILABLE else None


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


goroutine_before = njit(cache=True, nogil=True)(_goroutine_before) if AVAILABLE else None
