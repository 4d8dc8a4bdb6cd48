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
    seen: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
