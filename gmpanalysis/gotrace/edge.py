"""What a builder reading a later part of a trace keeps for the join (see gotrace.parallel)."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Edge:
    """What a builder that starts at a later part of a trace sees of the parts before it:
    the references to their rows and threads it could not resolve, and its own rows' first
    appearances, for :mod:`gotrace.parallel` to join the parts as one builder would have."""

    touched: set[int] = dataclasses.field(default_factory=set)  # threads with events here
    first_stop: dict[int, int] = dataclasses.field(default_factory=dict)  # thread -> its first stop (ns)
    first_sweep: dict[int, tuple[int, int, int]] = dataclasses.field(default_factory=dict)  # thread -> end, bytes
    orphans: list[tuple[int, str]] = dataclasses.field(default_factory=list)  # labels of no start here
    # per chunk with rows: the first row of each goroutine not seen before here (goroutine,
    # id, start), and the chunk's last start; and the goroutines seen so far
    heads: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = dataclasses.field(default_factory=list)
    seen: SeenIds = dataclasses.field(default_factory=lambda: SeenIds())
    # threads whose P a row or sweep here took before an event here set it (the P guessed
    # for them matters), and threads whose P an event here set
    p_used: set[int] = dataclasses.field(default_factory=set)
    p_set: set[int] = dataclasses.field(default_factory=set)

    def took(self, streams: dict) -> None:
        """Note the threads of one chunk's streams (see Builder._take_groups)."""
        ms = streams["m_ids"].tolist()
        self.touched.update(ms)
        if "p_used" not in streams:  # no running intervals built: no P taken
            return
        for m, used, known in zip(ms, streams["p_used"].tolist(), streams["p_set"].tolist(), strict=True):
            if used and m not in self.p_set:
                self.p_used.add(m)
            if known:
                self.p_set.add(m)


class SeenIds:
    """A set of goroutine ids, as sorted runs of falling size (the newest smallest; two are
    merged whenever the older is no bigger, as a binary counter carries), so a lookup is one
    search per run and each id is merged O(log n) times in all. A server's trace meets a new
    goroutine per request: one sorted array grown by a union at every chunk made a part of
    an 837 MB trace (3.5 M goroutines) take 200 s instead of 8."""

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def __len__(self) -> int:
        return sum(len(r) for r in self.runs)

    def add_new(self, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` were not in the set; adds them. ``ids``: int64, sorted and unique
        (a chunk's goroutines, as Builder._find_clashes groups them): the runs are searched
        as sorted arrays."""
        new = np.ones(len(ids), dtype=bool)
        for r in self.runs:
            at = np.searchsorted(r, ids)
            hit = at < len(r)
            hit[hit] = r[at[hit]] == ids[hit]
            new &= ~hit
        add = ids[new]
        if len(add):
            self.runs.append(add.astype(np.int64, copy=True))
            while len(self.runs) > 1 and len(self.runs[-2]) <= len(self.runs[-1]):
                b, a = self.runs.pop(), self.runs.pop()
                # two sorted runs without a common id: a stable sort merges them in one pass
                self.runs.append(np.sort(np.concatenate([a, b]), kind="stable"))
        return new
