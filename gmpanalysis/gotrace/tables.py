"""Decoded event columns -> GoTrace tables (intervals, ranges, metrics).

Every event is emitted by a thread (M), and an M's own stream is authoritative for what it
ran: a goroutine runs on an M from a start event (GoStart, GoSwitch, GoSyscallEnd, or a
GoStatus "running" at a generation start) to the next stop event on the same M. The state
an M carries (its P, its goroutine, whether that goroutine runs) is forward-filled along
each M's stream with array operations, never with a loop over events. STW, GC cycles and
mark assists are few and paired in plain Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a part's process builds rows, never frames (gotrace.partprocs)
    import pandas as pd

from . import kernels
from . import spec as s
from .columns import SCHEMAS, label_dtype, running_frame, typed_frame
from .edge import Edge
from .fewtables import FEW_COLS, few_tables
from .memory import trim
from .order import CLASH_BLOCK, consecutive, ffill, gc_cycles, in_time_order, resolve_overlaps, settle
from .rows import RowStore
from .streams import (
    GROUP_EVENTS,
    ON_M,
    SCHED,
    TABLE_TYPES,
    few_events,
    isin,
    thread_streams,
)

# what an event does to the goroutine bound to its thread (kernels.goroutine_before)
ROLE = np.zeros(256, dtype=np.int8)
ROLE[[s.EV_GOSTART, s.EV_GOSWITCH, s.EV_GOSWITCHDESTROY, s.EV_GOCREATESYSCALL]] = 1
ROLE[[s.EV_GOSTOP, s.EV_GOBLOCK, s.EV_GODESTROY, s.EV_GOSYSCALLENDBLOCKED, s.EV_GODESTROYSYSCALL]] = 2
ROLE[[s.EV_GOSTATUS, s.EV_GOSTATUSSTACK]] = 3


RUN_COLS = ("g", "p", "m", "start", "end", "done", "gen", "seq")
SWEEP_COLS = ("p", "m", "start_ns", "end_ns", "swept_bytes", "reclaimed_bytes", "done")
# what is held per row while the trace is read: the running table's columns (the label as
# a provisional id; -1 as the end of one still open), the sweep table's, and the heap samples' (NaN
# where the event sets the other value; filled forward when taken)
RUN_HELD = {
    "g": np.int64,
    "p": np.int32,
    "m": np.int64,
    "start": np.int64,
    "end": np.int64,
    "lab": np.int8,
}
SWEEP_HELD = {k: (bool if k == "done" else np.int64) for k in SWEEP_COLS}
HEAP_HELD = {"t_ns": np.int64, "heap_alloc_bytes": np.float64, "heap_goal_bytes": np.float64}
HEAP_TYPES = (s.EV_HEAPALLOC, s.EV_HEAPGOAL)
# rows reserved per byte of trace (pages never written cost nothing, but the address space
# is asked for): a busy server's trace holds a running interval per ~12 bytes and a heap
# sample per ~70. Past the reservation the columns grow by half.
RUN_ROWS_PER_BYTE = 1 / 8
HEAP_ROWS_PER_BYTE = 1 / 32


class Builder:
    """The tables, built one chunk (whole generations, in file order) at a time.

    Everything that crosses a generation boundary is carried here: each thread's state
    (the goroutine bound to it, whether it runs, its P), the running intervals and sweeps
    still open on each thread, and each thread's last start (which a GoLabel may name).
    Memory is what one chunk decodes to plus the output rows, which are written once into
    the columns of the tables to come (:class:`~.rows.RowStore`; ``size``, the trace's
    bytes, sets their reservation). ``want`` names the tables to build; without "running"
    and "sweep", only the threads' goroutines are followed (the STW and assist tables name
    the goroutine).
    """

    def __init__(self, want: frozenset[str] = frozenset(SCHEMAS) | {"gc", "gomaxprocs", "heap"}, size: int = 0) -> None:
        self.want = want
        self.running = bool({"running", "sweep"} & want)
        self.threads = bool({"running", "sweep", "stw", "assist", "logs", "labels"} & want)
        # only the events of the tables asked for are kept (heap samples alone are millions)
        self.glob_types = tuple(t for name in ("gc", "gomaxprocs") if name in want for t in TABLE_TYPES[name])
        self.heap_types = HEAP_TYPES if "heap" in want else ()
        self.few_types = tuple(
            t for name in ("stw", "assist", "logs", "labels") if name in want for t in TABLE_TYPES[name]
        )
        self.m_state: dict[int, tuple[int, int, int]] = {}
        self.run = RowStore(RUN_HELD, int(size * RUN_ROWS_PER_BYTE) if "running" in want else 0)
        self.sweeps = RowStore(SWEEP_HELD)
        self.heap = RowStore(HEAP_HELD, int(size * HEAP_ROWS_PER_BYTE) if self.heap_types else 0)
        self.pending_run: dict[int, list[int]] = {}  # M -> ids of its rows still open
        self.pending_sweep: dict[int, list[int]] = {}
        self.last_start: dict[int, int] = {}  # M -> id of its last start
        # each goroutine's last interval in the chunks so far (sorted by goroutine): id, end,
        # done; and the pairs of a goroutine's intervals that may overlap, in the order found
        # (goroutine, id of the first, id of the second, whether the sequence swaps them)
        self.carry = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool))
        self.clashes: list[tuple[int, int, int, bool]] = []
        # the chunk being fed: where its rows begin, their generations and sequence numbers,
        # the threads whose references to them must follow their sort; where its heap
        # samples begin
        self._chunk_lo: int | None = None
        self._stage: list[tuple[np.ndarray, np.ndarray]] = []
        self._moved: set[int] = set()
        self._heap_lo: int | None = None
        self.few_parts: list[dict] = []
        self.glob_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.names: dict[str, int] = {"": 0}  # label -> provisional id
        self.last_procs = -1  # GOMAXPROCS and heap values in force after the rows taken so far
        self.last_heap = {"heap_alloc_bytes": np.nan, "heap_goal_bytes": np.nan}
        # set when this builder reads a later part of the trace beside others (see
        # gotrace.parallel): what the chunks before it would have been told is kept there
        self.edge: Edge | None = None

    def feed(self, c: dict[str, np.ndarray], strings: dict[tuple[int, int], str]) -> None:
        """Take one chunk's decoded event columns (file order; released as used)."""
        gsel = np.flatnonzero(isin(c["type"], self.glob_types))
        self.glob_parts.append((c["ts"][gsel], c["type"][gsel], c["a0"][gsel]))
        if self.heap_types:
            self._feed_heap(c)
        if not self.threads:
            return
        if kernels.use():
            if not self.running:
                self._feed_goroutines(c, strings)
                return
            groups = [self._threads_compiled(c, strings)]
            for k in ("m", "ts", "type", "a0", "a1", "a2", "gen", "mi"):
                c.pop(k, None)
            self._take_groups(groups)
            return
        sel = np.flatnonzero(isin(c["type"], SCHED + ON_M)).astype(np.int32)
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
        groups = []
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            if b <= a:
                continue
            idx = order[a:b]
            groups.append(
                thread_streams(
                    *(c[k][idx] for k in ("m", "ts", "type", "a0", "a1", "a2", "gen")),
                    strings,
                    self.m_state,
                    self.running,
                    self.few_types,
                )
            )
        del order
        for k in ("m", "ts", "type", "a0", "a1", "a2", "gen"):
            c.pop(k, None)
        self._take_groups(groups)

    def _take_groups(self, groups: list[dict]) -> None:
        """Keep what the threads' streams of one chunk gave (see :func:`thread_streams`)."""
        if not groups:
            return
        self.few_parts.append(
            {
                k: np.concatenate([p["few"][k] for p in groups])
                if k in FEW_COLS[:5]
                else [x for p in groups for x in p["few"][k]]
                for k in FEW_COLS
            }
        )
        if self.edge is not None:
            for p in groups:
                self.edge.took(p)
        for p in groups:
            for m, g, r, pp in zip(
                p["m_ids"].tolist(), p["g_end"].tolist(), p["run_end"].tolist(), p["p_end"].tolist(), strict=True
            ):
                self.m_state[m] = (g, r, pp)
        if self.running:
            self.feed_running(groups)

    def _threads_compiled(self, c: dict[str, np.ndarray], strings: dict[tuple[int, int], str]) -> dict:
        """What :func:`thread_streams` gives, from one compiled pass over the chunk in file order
        (kernels.threads); rows come in file order rather than thread by thread."""
        m_ids = c["m_ids"]
        st = np.array([self.m_state.get(int(m), (-1, 0, -1)) for m in m_ids.tolist()], dtype=np.int64).reshape(-1, 3)
        st_g, st_run, st_p = st[:, 0].copy(), st[:, 1].copy(), st[:, 2].copy()
        nm, n = len(m_ids), len(c["type"])
        first_stop_t = np.full(nm, -1, dtype=np.int64)
        last_start_row = np.full(nm, -1, dtype=np.int64)
        first_sweep = np.full((3, nm), -1, dtype=np.int64)
        g_before = np.empty(n, dtype=np.int64)
        # room for one row per event; pages never written stay out of memory
        rows = np.empty((4, n), dtype=np.int64)
        r_p, r_gen, r_seq = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
        r_done = np.empty(n, dtype=bool)
        label_row = np.empty(n, dtype=np.int64)
        sweeps = np.empty((6, n), dtype=np.int64)
        s_done = np.empty(n, dtype=bool)
        typ, m = c["type"], c["m"]
        p_known, p_used = np.zeros(nm, dtype=bool), np.zeros(nm, dtype=bool)
        nr, nl, ns = kernels.threads(
            c["mi"], m, typ, c["ts"], c["a0"], c["a1"], c["a2"], c["gen"], st_g, st_run, st_p,
            first_stop_t, last_start_row, first_sweep, g_before, rows, r_p, r_gen, r_seq, r_done,
            label_row, sweeps, s_done, p_known, p_used,
        )  # fmt: skip
        out: dict[str, object] = {
            "m_ids": m_ids,
            "g_end": st_g,
            "run_end": st_run,
            "p_end": st_p,
            "p_set": p_known,
            "p_used": p_used,
            "first_stop_t": first_stop_t,
            "last_start_row": last_start_row,
            "g": rows[0, :nr].copy(),
            "m": rows[1, :nr].copy(),
            "start": rows[2, :nr].copy(),
            "end": rows[3, :nr].copy(),
            "p": r_p[:nr].copy(),
            "gen": r_gen[:nr].copy(),
            "seq": r_seq[:nr].copy(),
            "done": r_done[:nr].copy(),
            "first_sweep_end": (first_sweep[0], first_sweep[1], first_sweep[2]),
            "sweep": {
                "p": sweeps[0, :ns].copy(),
                "m": sweeps[1, :ns].copy(),
                "start_ns": sweeps[2, :ns].copy(),
                "end_ns": sweeps[3, :ns].copy(),
                "swept_bytes": sweeps[4, :ns].copy(),
                "reclaimed_bytes": sweeps[5, :ns].copy(),
                "done": s_done[:ns].copy(),
            },
        }
        del rows, sweeps
        li = np.flatnonzero(typ == s.EV_GOLABEL)
        lrow = label_row[:nl]
        names = [strings.get((int(g), int(a)), "") for g, a in zip(c["gen"][li], c["a0"][li], strict=True)]
        ok = (lrow >= 0).tolist()
        out["label_pos"] = lrow[lrow >= 0]
        out["label_names"] = [x for x, k in zip(names, ok, strict=True) if k]
        out["orphan_labels"] = [(int(mm), x) for mm, x, k in zip(m[li].tolist(), names, ok, strict=True) if not k]
        out["few"] = few_events(c["ts"], g_before, typ, c["a0"], c["a1"], c["a2"], m, c["gen"], strings, self.few_types)
        return out

    def _feed_goroutines(self, c: dict[str, np.ndarray], strings: dict[tuple[int, int], str]) -> None:
        """Without running intervals, only the goroutine on each thread is followed, in one
        compiled pass over the chunk in file order (each thread's events are in order)."""
        m_ids = c["m_ids"]
        state = np.array([self.m_state.get(int(m), (-1, 0, -1))[0] for m in m_ids.tolist()], dtype=np.int64)
        g_before = np.empty(len(c["type"]), dtype=np.int64)
        kernels.goroutine_before(
            c["mi"], c["m"], c["type"], c["a0"], c["a1"], c["a2"], ROLE, state, s.GO_RUNNING, s.GO_SYSCALL, g_before
        )
        if self.edge is not None:
            self.edge.touched.update(m_ids.tolist())
        for m, g in zip(m_ids.tolist(), state.tolist(), strict=True):
            self.m_state[m] = (g, 0, -1)
        self.few_parts.append(
            few_events(
                c["ts"], g_before, c["type"], c["a0"], c["a1"], c["a2"], c["m"], c["gen"], strings, self.few_types
            )
        )

    def _feed_heap(self, c: dict[str, np.ndarray]) -> None:
        """Heap samples, in file order (flush() sorts each chunk's by time)."""
        hi = np.flatnonzero(isin(c["type"], self.heap_types))
        if self._heap_lo is None:
            self._heap_lo = self.heap.n
        ty, v = c["type"][hi], c["a0"][hi].astype(np.float64)
        self.heap.append(
            {
                "t_ns": c["ts"][hi],
                "heap_alloc_bytes": np.where(ty == s.EV_HEAPALLOC, v, np.nan),
                "heap_goal_bytes": np.where(ty == s.EV_HEAPGOAL, v, np.nan),
            }
        )

    def feed_running(self, groups: list[dict]) -> None:
        """Take the running intervals, sweeps and labels of one chunk's thread groups."""
        sizes = [len(p["g"]) for p in groups]
        offs = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        # one column at a time, each group's copy released as it is used
        rows = {k: np.concatenate([p.pop(k) for p in groups]) for k in RUN_COLS}
        ids = [
            (p["label_pos"] + o, [self.names.setdefault(x, len(self.names)) for x in p["label_names"]])
            for p, o in zip(groups, offs[:-1].tolist(), strict=True)
            if p["label_names"]
        ]
        self._label_room()
        lab = np.zeros(int(offs[-1]), dtype=self.run.dtypes["lab"])
        for pos, v in ids:
            lab[pos] = v
        run = self.run
        # close what earlier chunks left open on these threads, at each thread's first stop
        edge = self.edge
        for p in groups:
            for m, t in zip(p["m_ids"].tolist(), p["first_stop_t"].tolist(), strict=True):
                if t >= 0 and edge is not None:
                    edge.first_stop.setdefault(m, t)
                if t >= 0 and m in self.pending_run:
                    at = run.positions(self.pending_run.pop(m))
                    at = at[at >= 0]
                    run.col("end")[at] = t
            for m, x in p["orphan_labels"]:
                if m in self.last_start:
                    self.label_row(self.last_start[m], x)
                elif edge is not None:
                    edge.orphans.append((m, x))
        # rows in file order for now; flush() puts the chunk's rows in time order
        rows["lab"] = lab
        del lab
        if self._chunk_lo is None:
            self._chunk_lo = run.n
        first = run.append({k: rows[k] for k in RUN_HELD})
        self._stage.append((rows.pop("gen"), rows.pop("seq")))
        for p, o in zip(groups, offs[:-1].tolist(), strict=True):
            for m, r in zip(p["m_ids"].tolist(), p["last_start_row"].tolist(), strict=True):
                if r >= 0:
                    self.last_start[m] = first + r + o
                    self._moved.add(m)
        for r in np.flatnonzero(~rows["done"]).tolist():
            m = int(rows["m"][r])
            self.pending_run.setdefault(m, []).append(first + r)
            self._moved.add(m)
        del rows
        # sweeps the same way
        for p in groups:
            t_end, a0, a1 = p["first_sweep_end"]
            for m, t, sw, rc in zip(p["m_ids"].tolist(), t_end.tolist(), a0.tolist(), a1.tolist(), strict=True):
                if t >= 0 and edge is not None:
                    edge.first_sweep.setdefault(m, (t, sw, rc))
                if t >= 0 and m in self.pending_sweep:
                    self.end_sweeps(self.pending_sweep.pop(m), t, sw, rc)
        sw = {k: np.concatenate([p["sweep"][k] for p in groups]) for k in SWEEP_COLS}
        sfirst = self.sweeps.append(sw)
        for r in np.flatnonzero(~sw["done"]).tolist():
            self.pending_sweep.setdefault(int(sw["m"][r]), []).append(sfirst + r)

    def label_row(self, row_id: int, name: str) -> None:
        """Name the goroutine of a held running row (a GoLabel after its start)."""
        at = int(self.run.positions([row_id])[0])
        if at >= 0:
            v = self.names.setdefault(name, len(self.names))
            self._label_room()
            self.run.col("lab")[at] = v

    def end_sweeps(self, ids: list[int], t: int, swept: int, reclaimed: int) -> None:
        """End held sweeps at a thread's sweep end."""
        at = self.sweeps.positions(ids)
        at = at[at >= 0]
        self.sweeps.col("end_ns")[at] = t
        self.sweeps.col("swept_bytes")[at] = swept
        self.sweeps.col("reclaimed_bytes")[at] = reclaimed
        self.sweeps.col("done")[at] = True

    def flush(self) -> None:
        """A chunk (whole generations) is all in: its running rows and heap samples go in
        time order (by start, then thread; ties in file order), the ids of its rows that
        threads still refer to follow them, and the overlaps among its rows and against
        earlier chunks are found (see :meth:`_find_clashes`)."""
        if self._heap_lo is not None:
            lo, self._heap_lo = self._heap_lo, None
            self.heap.permute(lo, np.argsort(self.heap.col("t_ns")[lo:], kind="stable"))
        if self._chunk_lo is None:
            return
        lo, self._chunk_lo = self._chunk_lo, None
        run = self.run
        perm = np.lexsort((run.col("m")[lo:], run.col("start")[lo:]))
        run.permute(lo, perm)
        inv = np.empty_like(perm)
        inv[perm] = np.arange(len(perm))
        id_lo = run.next_id - (run.n - lo)

        def now(x: int) -> int:
            return x if x < id_lo else id_lo + int(inv[x - id_lo])

        for m in self._moved:
            if m in self.pending_run:
                self.pending_run[m] = [now(x) for x in self.pending_run[m]]
            if m in self.last_start:
                self.last_start[m] = now(self.last_start[m])
        self._moved = set()
        gen, seq = (np.concatenate([x[i] for x in self._stage])[perm] for i in (0, 1))
        self._stage = []
        rows = {k: run.col(k)[lo:] for k in ("g", "start", "end")}
        self._find_clashes(id_lo, {**rows, "gen": gen, "seq": seq})

    def _label_room(self) -> None:
        """Widen the held label ids when the names outgrow them (hostile traces only)."""
        need = label_dtype(len(self.names))
        if np.dtype(need).itemsize > self.run.dtypes["lab"].itemsize:
            self.run.retype("lab", need)

    def _find_clashes(self, first: int, rows: dict[str, np.ndarray]) -> None:
        """Pairs of one goroutine's intervals that may overlap (see :func:`settle`), among
        this chunk's rows (in time order, ids from ``first``) and against each goroutine's
        last interval in earlier chunks. An interval still open may yet end after the next
        one starts: its pair is kept, to be checked once its end is known."""
        g, start, end = rows["g"], rows["start"], rows["end"]  # end -1: still open
        if not len(g):
            return
        order = np.argsort(g, kind="stable")  # by goroutine, then time
        gs = g[order]
        found_a, found_b = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for lo in range(0, len(order) - 1, CLASH_BLOCK):  # in blocks: no temporaries per row
            x, gx = order[lo : lo + CLASH_BLOCK + 1], gs[lo : lo + CLASH_BLOCK + 1]
            a, b = x[:-1], x[1:]
            hit = (gx[1:] == gx[:-1]) & ((end[a] < 0) | (start[b] < end[a]))
            found_a.append(a[hit])
            found_b.append(b[hit])
        a, b = np.concatenate(found_a), np.concatenate(found_b)
        gen, seq = rows["gen"], rows["seq"]
        swap = (gen[a] == gen[b]) & (seq[a] >= 0) & (seq[b] >= 0) & (seq[b] < seq[a])
        new_g = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])  # each goroutine's first row
        heads, tails = new_g, np.r_[new_g[1:] - 1, len(gs) - 1]
        hg, hpos = gs[heads], order[heads]
        if self.edge is not None:
            e = self.edge
            fresh = e.seen.add_new(hg)
            e.heads.append((hg[fresh], hpos[fresh] + first, start[hpos[fresh]], int(start[-1])))
        cg, cid, cend, cdone = self.carry
        at = np.searchsorted(cg, hg)
        known = at < len(cg)
        known[known] = cg[at[known]] == hg[known]
        ci, bi = at[known], hpos[known]
        cross = ~cdone[ci] | (start[bi] < cend[ci])
        hb = bi[cross]
        hk = hg[known][cross].tolist()
        found = list(zip(hk, cid[ci][cross].tolist(), (hb + first).tolist(), [False] * len(hk), strict=True))
        found += zip(g[a].tolist(), (a + first).tolist(), (b + first).tolist(), swap.tolist(), strict=True)
        self.clashes.extend(found)
        # each goroutine's last interval here replaces the one carried; one that ended before
        # this chunk's last start can overlap nothing to come (later chunks start later)
        tg, tpos = gs[tails], order[tails]
        old = ~np.isin(cg, tg)
        cg, cid, cend, cdone = (
            np.r_[cg[old], tg],
            np.r_[cid[old], tpos + first],
            np.r_[cend[old], end[tpos]],
            np.r_[cdone[old], end[tpos] >= 0],
        )
        live = ~cdone | (cend > start[-1])
        o = np.argsort(cg[live], kind="stable")
        self.carry = (cg[live][o], cid[live][o], cend[live][o], cdone[live][o])

    def _settle(self, final: bool) -> bool:
        """Put the overlapping intervals found in order, in the held rows: those whose two
        rows are both done (all, if ``final``). True if a start moved."""
        if not self.clashes:
            return False
        c = np.array(self.clashes, dtype=np.int64).reshape(-1, 4)
        c = c[np.argsort(c[:, 0], kind="stable")]  # a goroutine's pairs in the order found
        pa, pb = self.run.positions(c[:, 1]), self.run.positions(c[:, 2])
        both = (pa >= 0) & (pb >= 0)
        end = self.run.col("end")
        ready = both & (final | ((end[np.maximum(pa, 0)] >= 0) & (end[np.maximum(pb, 0)] >= 0)))
        self.clashes = [tuple(x) for x in c[both & ~ready].tolist()]
        r = np.flatnonzero(ready)
        return settle(self.run.col("start"), self.run.col("end"), pa[r], pb[r], c[r, 3].astype(bool))

    def _settle_all(self) -> bool:
        """:meth:`_settle` when chunks overlap in time (rare): the pairs are the intervals of
        a goroutine that follow one another among all rows (by start, then thread, as one
        chunk would give them), with the swaps by sequence number found chunk by chunk (the
        intervals of one generation are always in one chunk)."""
        run = self.run
        start, end = run.col("start"), run.col("end")
        a, b = consecutive(run.col("g"), start, run.col("m"))
        ids = run.ids()
        swapped = {(x, y) for _, x, y, sw in self.clashes if sw}
        swap = np.zeros(len(a), dtype=bool)
        if swapped:
            swap = np.array([(x, y) in swapped for x, y in zip(ids[a].tolist(), ids[b].tolist(), strict=True)])
        self.clashes = []
        return settle(start, end, a, b, swap)

    def finish(self, last_ns: int) -> dict[str, object]:
        """The tables; ranges still open close at ``last_ns`` (flagged ``open``)."""
        return self.take(last_ns, final=True)

    def take(self, last_ns: int, *, final: bool = False) -> dict[str, object]:
        """The rows complete so far, removed from the builder; what is still open (intervals,
        sweeps, STWs, assists, a GC cycle) stays for the chunks to come. With ``final``, the
        open ones close at ``last_ns`` and come too, flagged ``open``.

        Overlapping intervals of one goroutine (see :func:`settle`) are put in order
        when both are taken."""
        self.flush()
        out: dict[str, object] = {
            name: typed_frame({}, SCHEMAS[name]) for name in ("running", "sweep", "stw", "assist", "logs", "labels")
        }
        if self.running and (self.run.n or final):
            out["running"] = self._take_running(last_ns, final)
            trim()  # the held copies of the label and the ends just went
        if self.running and (self.sweeps.n or final):
            out["sweep"] = self._take_sweeps(last_ns, final)
        if self.few_parts:
            parts, self.few_parts = self.few_parts, []
            few, self.few_parts = few_tables(parts, "assist" in self.want, last_ns, final)
            out.update(few)
        out["gomaxprocs"], out["gc"] = self._take_global(last_ns, final)
        out["heap"] = self._take_heap()
        for name in out:
            if name not in self.want:  # not asked for: an empty table of the same columns
                out[name] = out[name].iloc[0:0].reset_index(drop=True)
        return out

    def _take_running(self, last_ns: int, final: bool) -> pd.DataFrame:
        """The running table of the intervals taken (see :meth:`take`), in time order."""
        if final:
            end = self.run.col("end")
            is_open = end < 0
            end[is_open] = last_ns
            del end
            # each chunk's rows are in time order; chunks follow one another unless a
            # thread's clock overlapped the next generation's: then which intervals of a
            # goroutine follow one another is only known from all rows at once
            in_order = in_time_order(self.run.col("start"), self.run.col("m"))
            moved = self._settle(True) if in_order else self._settle_all()
            cols = self.run.finish()
        else:
            moved = self._settle(False)
            cols = self.run.take(self.run.col("end") >= 0)
            is_open = np.zeros(len(cols["end"]), dtype=bool)
            in_order = in_time_order(cols["start"], cols["m"])
            if not in_order:  # put in order among the rows taken together
                moved |= resolve_overlaps(cols["g"], cols["start"], cols["end"], cols["m"])
        start, end, m = cols["start"], cols["end"], cols["m"]
        by_time = None if (in_order and not moved) else np.lexsort((m, start))

        def pick(a: np.ndarray) -> np.ndarray:
            return a if by_time is None else a[by_time]

        # each column put in order in turn, its unordered copy let go before the next
        ordered = {"g": pick(cols.pop("g")), "p": pick(cols.pop("p")), "m": pick(m), "start_ns": pick(start)}
        ordered.update(end_ns=pick(end), open=pick(is_open))
        return running_frame(ordered, pick(cols.pop("lab")), self.names)

    def _take_sweeps(self, last_ns: int, final: bool) -> pd.DataFrame:
        """The sweep table of the sweeps taken (see :meth:`take`), by start."""
        sw = self.sweeps.finish() if final else self.sweeps.take(self.sweeps.col("done").copy())
        sdone = sw.pop("done")
        sw["end_ns"][~sdone] = last_ns
        sw["open"] = ~sdone
        out = typed_frame(sw, SCHEMAS["sweep"]).sort_values(["start_ns", "m"], kind="stable", ignore_index=True)
        # a sweep under way when a generation begins is stated again there (GCSweepActive),
        # which opens a row where the sweep's own began one: a thread sweeps for one P at a
        # time, so two rows it ends at one sweep end are one sweep, from the earlier start
        again = out.duplicated(["m", "end_ns", "swept_bytes", "reclaimed_bytes", "open"])
        return out[~again.to_numpy()].reset_index(drop=True) if again.any() else out

    def _take_global(self, last_ns: int, final: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The gomaxprocs table (real changes only) and the gc table from the global events
        held; a GC cycle still open stays held unless ``final``."""
        glob = self.glob_parts or [(np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.int64))]
        gt, gty, ga0 = (np.concatenate([p[i] for p in glob]) for i in range(3))
        self.glob_parts = []
        order = np.argsort(gt, kind="stable")
        gt, gty, ga0 = gt[order], gty[order], ga0[order]
        pc = gty == s.EV_PROCSCHANGE
        procs_t, procs_v = gt[pc], ga0[pc]
        prev = np.r_[self.last_procs, procs_v[:-1]]
        keep = procs_v != prev
        if len(procs_v):
            self.last_procs = int(procs_v[-1])
        procs = typed_frame({"t_ns": procs_t[keep], "procs": procs_v[keep]}, {"t_ns": "int64", "procs": "int64"})
        gc, open_gc = gc_cycles(gt, gty, ga0, last_ns, final)
        if not final and open_gc is not None:
            self.glob_parts = [(gt[[open_gc]], gty[[open_gc]], ga0[[open_gc]])]
        return procs, gc

    def _take_heap(self) -> pd.DataFrame:
        """The heap table of every sample held, each value filled forward."""
        hp = self.heap.finish()  # samples are instants: every one is complete
        t = hp["t_ns"]
        if len(t) > 1 and not bool(np.all(t[1:] >= t[:-1])):  # chunks overlap in time: rare
            o = np.argsort(t, kind="stable")
            hp = {k: v[o] for k, v in hp.items()}
        for k in ("heap_alloc_bytes", "heap_goal_bytes"):
            if k in hp:
                # the values in force before these rows: carried from the rows taken earlier
                self.last_heap[k] = ffill(hp[k], self.last_heap[k])
        return typed_frame(hp, {k: np.dtype(v).name for k, v in HEAP_HELD.items()})
