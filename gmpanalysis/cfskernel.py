"""The event loop of :mod:`gmpanalysis.cfsreplay`, on arrays: compiled by numba where it is
installed (``pip install gmpanalysis[fast]``), plain Python otherwise, with the same
results (the tests run both).

The loop steps from event to event (an arrival, a completion, a tick that finds a CPU out
of runtime, a level's boundary) and each step is exact, so its cost is the number of events
times the work per event (a few passes over the CPUs; a request entering or leaving service
costs log n of the requests in service). In Python a step takes a few µs; compiled, well
under 0.1 µs: an hour of a shipped run's demand (310,000 steps, 260 requests in service on
average) in 20-40 ms instead of 1-2 s (benchmarks/bench_replay.py).

The same functions serve both: they use nothing but indexing, ``len``, ``range`` and
``math``, so the plain-Python path runs them on lists (Python floats, as fast as the loop
can be in Python) and the compiled one on numpy arrays. A 2-D state (level × CPU) is read
``a[lvl][j]``. Python's ``min`` and ``max`` of two floats keep the first unless the second
is strictly smaller (larger); :func:`_min` and :func:`_max` do the same, so both paths
take the same steps bit for bit.

The state, as :func:`gmpanalysis.cfsreplay.replay` lays it out:

* per level ``lvl`` (0: the table's own, then the levels above): ``lv[lvl]`` = (period, next
  boundary, period start, quota in force, pool, burst, short), columns PERIOD ... SHORT (ns;
  a quota of inf: no limit then; short: 1 once the pool has fallen short of a draw); ``k``
  the period number on the level's own grid; its quota by period number ``qk``/``qv``
  (sorted, the levels' runs one after another, level lvl's at ``q_at[lvl]:q_at[lvl + 1]``; a
  period past the last known keeps the last, one before the first takes the first);
  ``limited`` whether any of them is finite; ``gates`` the limited levels' indices, in level
  order.
* per level and CPU: ``local`` (runtime held; below 0: what it overran), ``frozen``
  (throttled by this level), ``froze_at`` (when, in this period; NaN: not).
* the requests: ``ids``/``rem`` (the ones in service, a binary heap on ``rem``: the
  service clock's reading at which each is served; see :data:`REBASE_NS`), ``waitq``
  (those a closed loop holds back, first in first out),
  ``runnable`` (per CPU: the work is on it and no level throttles it), ``end``/``sent``
  (when each was answered / entered the service).
* ``rows``: per period of the own level from the first, (CPU used, exhausted at (offset
  into the period; NaN: never), stall, CPUs frozen through the stall, throttled at the
  boundary (0/1), and how long the work stood still with a level above throttling a CPU
  it was on: in all, and alone (the own level throttling none of them), which the own
  level's stall does not count).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import types
from collections.abc import Callable
from typing import Any

from .kernelfacts import MIN_CFS_RQ_RUNTIME_NS

# numba is optional; GMP_NO_NUMBA=1 runs the plain-Python loop even where it is installed. It
# is imported, and the loop compiled (or loaded from numba's cache), on the first replay.
AVAILABLE = not os.environ.get("GMP_NO_NUMBA") and importlib.util.find_spec("numba") is not None
# the replay uses the compiled loop when AVAILABLE and this is set; tests clear it to run the
# plain-Python loop on the same inputs
ENABLED = True

# what the loop treats as "at the same time" and "no runtime left" (ns)
EPS = 1e-6
# an idle CPU keeps this much runtime (min_cfs_rq_runtime, 1 ms) and hands the rest back
MIN_RUNTIME_NS = float(MIN_CFS_RQ_RUNTIME_NS)
# Processor sharing gives every request in service the same CPU, so one clock counts the CPU
# each has had since it was reset (``served``) and a request is kept as the reading at which
# its CPU is served: a step moves the clock, not every request (a limit below the demand
# grows the backlog without end, and a pass over it at every step made an hour's replay take
# seconds). The readings sit in a binary heap, the least first. The clock goes back to 0
# past this (the readings with it), so that they stay exact to far below the tolerance.
REBASE_NS = 1e9
# the columns of lv and of rows
PERIOD, BOUNDARY, START, QUOTA, POOL, BURST, SHORT = range(7)
USED, EXHAUSTED, STALL, CPUS, THROTTLED, FROZEN_ABOVE, FROZEN_ABOVE_ALONE = range(7)
ROW_COLUMNS = 7
# replay_events' answer when rows has no room for the next period
NO_ROOM = -1
# its answer when a closed loop's clients, still sending (before ``stop``), find no request
# left to send: the caller gives it more (its requests, again, in turn)
NO_REQUESTS = -2


def use() -> bool:
    return AVAILABLE and ENABLED


def _min(a: float, b: float) -> float:
    return b if b < a else a


def _max(a: float, b: float) -> float:
    return b if b > a else a


def cpus_taken(k: int, C: int) -> int:
    """The CPUs that k threads with work run on, of C, after a quota has frozen them: as
    many as k balls thrown at random into C bins fill, C(1 - (1 - 1/C)^k), to the nearest
    whole CPU. A throttled thread stays on its CPU, and while the group is frozen a CPU holding
    only its throttled share looks idle to the wake-up placement (which scans only part of a
    busy cache domain), so Go's threads stand where they happened to be put; at the boundary
    two on one CPU share it until the idle balancer moves one. On 16 CPUs, the Ps running
    before the quota ran out against the CPUs' worth of CPU they used: 1.98 against 1.93,
    3.94 against 3.72, 14.85 against 9.12 (this gives 2, 4 and 10; the period's quota lasted
    77, 41 and 17 ms). On 1 or 2 CPUs it is min(k, C)."""
    if k <= 1 or C <= 1:
        return min(k, C)
    q, b, e = 1.0, 1.0 - 1.0 / C, k
    while e:  # (1 - 1/C)^k by squaring: the same multiplications, and floats, in Python and compiled
        if e & 1:
            q *= b
        b *= b
        e >>= 1
    return min(int(C * (1.0 - q) + 0.5), k, C)


def _quota_of(qk: Any, qv: Any, lo: int, hi: int, k: int) -> float:
    """The quota of period k among qk[lo:hi]: the last known at or before k, else the first."""
    a, z = lo, hi
    while a < z:  # bisect_right
        m = (a + z) // 2
        if k < qk[m]:
            z = m
        else:
            a = m + 1
    return qv[a - 1] if a > lo else qv[lo]


def _draw(lv: Any, local: Any, lvl: int, j: int, slice_ns: float) -> bool:
    """CPU j takes runtime from level lvl's pool: a slice, and what it overran; False if it
    still holds none (the caller throttles it). A draw the pool cannot cover in full marks
    the level SHORT: until then every draw was whole, and a larger pool would have changed
    nothing (the replay under a larger quota takes the same steps)."""
    ask = slice_ns - local[lvl][j]
    have = _max(lv[lvl][POOL], 0.0)
    if have < ask:
        lv[lvl][SHORT] = 1.0
    got = _min(ask, have)
    local[lvl][j] += got
    lv[lvl][POOL] -= got
    return local[lvl][j] > EPS


def _free(frozen: Any, gates: Any, j: int) -> bool:
    """No level throttles CPU j."""
    for lvl in gates:
        if frozen[lvl][j]:
            return False
    return True


def _refill(lv: Any, k: Any, qk: Any, qv: Any, q_at: Any, limited: Any, state: Any, lvl: int, t: float) -> None:
    """Level lvl's period timer: the next period's quota (with burst: plus what was left, up to
    quota + burst), each throttled CPU's overrun paid first, as far as it goes; a CPU whose
    overrun the pool cannot cover stays throttled, and counts as throttled from t."""
    local, frozen, froze_at = state
    k[lvl] += 1
    lv[lvl][START] = lv[lvl][BOUNDARY]
    lv[lvl][BOUNDARY] = lv[lvl][BOUNDARY] + lv[lvl][PERIOD]
    for j in range(len(froze_at[lvl])):
        froze_at[lvl][j] = math.nan
    quota = _quota_of(qk, qv, q_at[lvl], q_at[lvl + 1], k[lvl])
    lv[lvl][QUOTA] = quota
    if not limited[lvl]:
        return
    lv[lvl][POOL] = _min(lv[lvl][POOL] + quota, quota + lv[lvl][BURST]) if lv[lvl][BURST] > 0 else quota
    for j in range(len(frozen[lvl])):
        if frozen[lvl][j]:
            got = _min(-local[lvl][j] + 1.0, _max(lv[lvl][POOL], 0.0))
            local[lvl][j] += got
            lv[lvl][POOL] -= got
            frozen[lvl][j] = local[lvl][j] <= 0
            if frozen[lvl][j]:
                froze_at[lvl][j] = t


def _settle_cpus(lv: Any, gates: Any, state: Any, runnable: Any, was: int, now: int, slice_ns: float, t: float) -> int:
    """The work moves onto CPUs 0..now-1 (it was on 0..was-1): a CPU it leaves hands back what
    it holds beyond 1 ms to each level's pool; a CPU it wakes on with no runtime draws, each
    level from the group's own up, and the first whose pool cannot cover it throttles it at
    once (the enqueue stops there). A throttled CPU keeps its threads: its share waits.
    Marks the CPUs the work can run on and returns how many."""
    local, frozen, froze_at = state
    for lvl in gates:
        for j in range(now, was):
            if not frozen[lvl][j] and local[lvl][j] > MIN_RUNTIME_NS:
                lv[lvl][POOL] += local[lvl][j] - MIN_RUNTIME_NS
                local[lvl][j] = MIN_RUNTIME_NS
    for j in range(now):
        if not runnable[j] and _free(frozen, gates, j):
            for lvl in gates:
                if local[lvl][j] <= EPS and not _draw(lv, local, lvl, j, slice_ns):
                    frozen[lvl][j] = True
                    froze_at[lvl][j] = t
                    break
    running = 0
    for j in range(len(runnable)):
        runnable[j] = j < now and _free(frozen, gates, j)
        running += runnable[j]
    return running


def _held_above(frozen: Any, busy: int, nrem: int, running: int) -> int:
    """Whether the work stands still with a level above throttling a CPU it is on (which
    the own cpu.stat does not count): requests wait and none runs. 0: no; 1: yes, with the
    own level throttling one of them too (its stall: :func:`_mark_exhaustion`); 2: yes,
    the levels above alone."""
    if not nrem or running:
        return 0
    above = False
    own = False
    for j in range(busy):
        own = own or frozen[0][j]
        for lvl in range(1, len(frozen)):
            above = above or frozen[lvl][j]
    if not above:
        return 0
    return 1 if own else 2


def _mark_exhaustion(row: Any, lv: Any, frozen: Any, busy: int, nrem: int, running: int, t: float) -> None:
    """The own level's exhaustion: the moment the work stops because every CPU it is on is
    throttled, this level among those that throttled it (usage goes flat), and the stall
    from then to the boundary; undone if the work runs on (runtime left somewhere, or
    another level's refill) before the boundary."""
    if nrem and not running:
        for j in range(busy):
            if frozen[0][j]:
                if math.isnan(row[EXHAUSTED]):
                    row[EXHAUSTED] = t - lv[0][START]
                    row[STALL] = lv[0][BOUNDARY] - t
                return
    elif running and not math.isnan(row[EXHAUSTED]):
        row[EXHAUSTED] = math.nan
        row[STALL] = 0.0


def _next_step(lv: Any, gates: Any, local: Any, runnable: Any, least: float, nrem: int, running: int,
               arrival: float, t: float, tick: float, tick0: float, next_tick: float) -> float:  # fmt: skip
    """How long until the next event: a boundary of any level, the next arrival (``arrival``:
    NaN if none), the next completion (processor sharing: ``least``, the least CPU any
    request in service still needs, at running/nrem of a CPU each) or the next tick that
    finds a runnable CPU out of runtime at some level (the ticks before it change nothing)."""
    b = lv[0][BOUNDARY]
    for lvl in range(1, len(lv)):
        b = _min(b, lv[lvl][BOUNDARY])
    step = b - t
    if not math.isnan(arrival):
        step = _min(step, _max(arrival - t, 0.0))
    if running:
        step = _min(step, least * nrem / running)
        if len(gates):
            held = math.inf
            first = True
            for lvl in gates:
                for j in range(len(runnable)):
                    if runnable[j]:
                        held = local[lvl][j] if first else _min(held, local[lvl][j])
                        first = False
            out_at = t + _max(held, 0.0)
            nt = tick0 + math.ceil((out_at - tick0) / tick - 1e-9) * tick
            step = _min(step, (nt if nt > t + EPS else next_tick) - t)
    return _max(step, 0.0)


def _run_for(
    row: Any, gates: Any, local: Any, runnable: Any, nrem: int, running: int, served: float, dt: float
) -> float:
    """dt of processor sharing: each request in service gets dt × running / nrem of CPU (the
    service clock moves by that), and each runnable CPU's runtime is charged dt at every
    limited level. Returns the clock's new reading."""
    row[USED] += dt * running
    for lvl in gates:
        for j in range(len(runnable)):
            if runnable[j]:
                local[lvl][j] -= dt
    return served + dt * running / nrem


def _boundaries(lv: Any, k: Any, qk: Any, qv: Any, q_at: Any, limited: Any, gates: Any, state: Any,
                runnable: Any, row: Any, t: float) -> None:  # fmt: skip
    """The period timers due at t: the levels above first, then the own level, whose row is
    closed first: the CPUs frozen through its stall (a CPU throttled before the work went
    flat counts for the stall only, so never more than the CPUs it was on) and whether its
    timer found a CPU throttled (nr_throttled's rule)."""
    local, frozen, froze_at = state
    for lvl in range(1, len(lv)):
        if t >= lv[lvl][BOUNDARY] - EPS:
            _refill(lv, k, qk, qv, q_at, limited, state, lvl, t)
    if t >= lv[0][BOUNDARY] - EPS:
        if not math.isnan(row[EXHAUSTED]) and row[STALL] > 0:
            s = 0.0
            for j in range(len(froze_at[0])):
                if not math.isnan(froze_at[0][j]):
                    s += _min(lv[0][BOUNDARY] - froze_at[0][j], row[STALL])
            row[CPUS] = s / row[STALL]
        row[THROTTLED] = 0.0
        for j in range(len(frozen[0])):
            if frozen[0][j]:
                row[THROTTLED] = 1.0
        _refill(lv, k, qk, qv, q_at, limited, state, 0, t)
    for j in range(len(runnable)):
        runnable[j] = runnable[j] and _free(frozen, gates, j)


def _tick(lv: Any, gates: Any, state: Any, runnable: Any, slice_ns: float, t: float) -> None:
    """A scheduler tick: each runnable CPU out of runtime at a level draws from its pool, and
    is throttled there if the pool cannot cover it."""
    local, frozen, froze_at = state
    for j in range(len(runnable)):
        if runnable[j]:
            for lvl in gates:
                if local[lvl][j] <= EPS and not _draw(lv, local, lvl, j, slice_ns):
                    frozen[lvl][j] = True
                    froze_at[lvl][j] = t
    for j in range(len(runnable)):
        runnable[j] = runnable[j] and _free(frozen, gates, j)


def heap_push(ids: Any, rem: Any, n: int, x: int, at: float) -> int:
    """Request ``x``, served at the clock's reading ``at``, into the heap of ``n``; returns n + 1."""
    j = n
    while j > 0:
        up = (j - 1) // 2
        if rem[up] <= at:
            break
        ids[j] = ids[up]
        rem[j] = rem[up]
        j = up
    ids[j] = x
    rem[j] = at
    return n + 1


def heap_pop(ids: Any, rem: Any, n: int) -> int:
    """The first request (the least reading) out of the heap of ``n``; returns n - 1."""
    n -= 1
    x = ids[n]
    at = rem[n]
    j = 0
    while 2 * j + 1 < n:
        c = 2 * j + 1
        if c + 1 < n and rem[c + 1] < rem[c]:
            c += 1
        if not rem[c] < at:
            break
        ids[j] = ids[c]
        rem[j] = rem[c]
        j = c
    if n > 0:
        ids[j] = x
        rem[j] = at
    return n


def _complete(
    reqs: Any, cost: Any, tol: float, nrem: int, served: float, w_head: int, w_tail: int, t: float
) -> tuple[int, int]:
    """The requests whose CPU is served by t (within tol) are answered; a closed loop sends
    one waiting request for each. Returns (in service, next waiting)."""
    ids, rem, waitq, end, sent = reqs
    done = 0
    while nrem > 0 and rem[0] - served <= tol:
        end[ids[0]] = t
        nrem = heap_pop(ids, rem, nrem)
        done += 1
    for _ in range(done):
        if w_head < w_tail:
            q = waitq[w_head]
            w_head += 1
            nrem = heap_push(ids, rem, nrem, q, served + cost[q])
            sent[q] = t
    return nrem, w_head


def _arrive(
    reqs: Any, arr: Any, cost: Any, conc: int, i: int, nrem: int, served: float, w_tail: int, t: float
) -> tuple[int, int, int]:
    """The requests scheduled by t arrive: into service, or, with conc clients all busy, to
    wait. Returns (next arrival, in service, waiting's end)."""
    ids, rem, waitq, end, sent = reqs
    while i < len(arr) and arr[i] <= t + EPS:
        if conc < 0 or nrem < conc:
            nrem = heap_push(ids, rem, nrem, i, served + cost[i])
        else:
            waitq[w_tail] = i
            w_tail += 1
        i += 1
    return i, nrem, w_tail


def _replay_events(
    arr: Any,
    cost: Any,
    conc: int,
    G: int,
    C: int,
    slice_ns: float,
    tick: float,
    tick0: float,
    tol: float,
    stop: float,
    n_own: int,
    levels: Any,
    state: Any,
    gates: Any,
    reqs: Any,
    runnable: Any,
    rows: Any,
) -> int:
    """Every event, from t = 0 (the own level's first period start) until every request is
    answered. ``levels`` = (lv, k, qk, qv, q_at, limited), ``state`` = (local, frozen,
    froze_at), ``reqs`` = (ids, rem, waitq, end, sent), as the module docstring lays them
    out (conc: -1 for an open loop). A closed loop's clients send the first ``n_own``
    requests whenever they can, and the rest only before ``stop`` (inf: all); those never
    sent keep end NaN. Fills rows; returns how many periods it covered, NO_ROOM if rows
    cannot hold them, or NO_REQUESTS if the clients ran out of requests before ``stop``."""
    lv, k, qk, qv, q_at, limited = levels
    local, frozen, froze_at = state
    ids, rem, waitq, end, sent = reqs
    n = len(arr)
    k0 = k[0]
    t = 0.0
    next_tick = tick0
    i = nrem = w_head = w_tail = busy = nrows = now = ran = 0
    stacked = False  # the threads started again where a freeze left them (cpus_taken)
    served = 0.0  # the service clock (REBASE_NS)
    while i < n or nrem > 0 or w_head < w_tail:
        r = k[0] - k0
        if r >= len(rows):
            return NO_ROOM
        nrows = max(nrows, r + 1)
        row = rows[r]
        if min(nrem, G) != ran:  # the threads with work, and the CPUs they run on
            ran = min(nrem, G)
            now = cpus_taken(ran, C) if stacked else min(ran, C)
        running = _settle_cpus(lv, gates, state, runnable, busy, now, slice_ns, t)
        busy = now
        if len(gates):
            _mark_exhaustion(row, lv, frozen, busy, nrem, running, t)
        arrival = arr[i] if i < n else math.nan
        least = rem[0] - served if nrem > 0 else math.inf  # the least CPU a request still needs
        dt = _next_step(lv, gates, local, runnable, least, nrem, running, arrival, t, tick, tick0, next_tick)
        # charge exactly the time the clock moves: past ~8.6 s a step of t rounds by more than
        # EPS, and runtime charged with the unrounded dt drifts from the ticks it is read at
        # (a CPU could run one tick too long)
        dt = (t + dt) - t
        if running and dt > 0:
            served = _run_for(row, gates, local, runnable, nrem, running, served, dt)
        elif dt > 0 and len(lv) > 1:
            held = _held_above(frozen, busy, nrem, running)
            if held:  # a step ends at the next boundary of any level: in this row
                row[FROZEN_ABOVE] += dt
                if held == 2:
                    row[FROZEN_ABOVE_ALONE] += dt
        still = nrem > 0 and running == 0 and dt > 0  # the work stood still (frozen) up to t
        t += dt
        while next_tick <= t + EPS:
            next_tick += tick
        due = False
        for lvl in range(len(lv)):
            due = due or t >= lv[lvl][BOUNDARY] - EPS
        if due:
            own = t >= lv[0][BOUNDARY] - EPS
            _boundaries(lv, k, qk, qv, q_at, limited, gates, state, runnable, row, t)
            if still or own:  # frozen threads start again where they stood; a period without
                stacked, ran = still, -1  # a freeze leaves them spread
        if len(gates) and abs(t - (next_tick - tick)) <= EPS:  # a tick (at a boundary too)
            _tick(lv, gates, state, runnable, slice_ns, t)
        # the clients' time is up: of what waits (in the order sent), they still send the run's own
        while t >= stop - EPS and w_tail > w_head and waitq[w_tail - 1] >= n_own:
            w_tail -= 1
        nrem, w_head = _complete(reqs, cost, tol, nrem, served, w_head, w_tail, t)
        stacked = stacked and nrem > 0  # threads woken once the work drained are placed anew
        i, nrem, w_tail = _arrive(reqs, arr, cost, conc, i, nrem, served, w_tail, t)
        if conc >= 0 and i >= n and w_head >= w_tail and nrem < conc and t < stop - EPS and stop < math.inf:
            return NO_REQUESTS
        if served > REBASE_NS:  # a constant off every reading: the heap's order holds
            for x in range(nrem):
                rem[x] = rem[x] - served
            served = 0.0
    return nrows


# the loop and what it calls, in an order where each calls only those before it
_CHAIN = (
    "_min",
    "_max",
    "cpus_taken",
    "_quota_of",
    "_draw",
    "_free",
    "_refill",
    "_settle_cpus",
    "_held_above",
    "_mark_exhaustion",
    "_next_step",
    "_run_for",
    "_boundaries",
    "_tick",
    "heap_push",
    "heap_pop",
    "_complete",
    "_arrive",
    "_replay_events",
)


@functools.cache
def compiled() -> Callable[..., int]:
    """The loop compiled by numba (on first use; later processes load it from numba's cache
    beside this file). The compiled functions are copies of the plain ones that see each
    other's compiled versions, so the plain-Python loop stays plain Python."""
    from numba import njit
    from numba.core.options import DefaultOptions

    # the loop allocates nothing and its caller holds every array it is handed, so numba's
    # reference counting (an atomic add at each view and each array handed to a helper: most
    # of the loop's time) is left out where this numba lets it be; the helpers are inlined
    # into the loop (numba's own inlining: the calls and their tuples of arrays go away)
    opts = {"_nrt": False} if hasattr(DefaultOptions, "_nrt") else {}
    scope = dict(globals())
    for name in _CHAIN:
        fn = globals()[name]
        copy = types.FunctionType(fn.__code__, scope, name, fn.__defaults__, fn.__closure__)
        copy.__qualname__ = fn.__qualname__
        inline = "never" if name == "_replay_events" else "always"
        scope[name] = njit(cache=True, nogil=True, inline=inline, **opts)(copy)
    return scope["_replay_events"]


def replay_events(*args: Any) -> int:
    """:func:`_replay_events`, compiled where numba is available (the arguments as numpy
    arrays, tuples of them), else in Python (give lists: Python floats, not numpy scalars,
    which are slower to compute with one at a time)."""
    return compiled()(*args) if use() else _replay_events(*args)
