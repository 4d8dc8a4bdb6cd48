"""Reading one part of a trace beside others (see :mod:`gotrace.parallel`): the builder's
state after it, from the threads' states the parts before it left, for the join."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import GmpError
from . import tables as _tables
from .decode import decode_chunk, new_info
from .edge import Edge, SeenIds
from .memory import trim
from .wire import Generation

# the state of a thread the builder has not seen (no goroutine, not running, no P)
NO_STATE = (-1, 0, -1)
# what a part tells of its own reading (see decode.new_info)
INFO_KEYS = ("events", "first_ns", "last_ns", "clock_snapshots", "clock_steps_back", "m_last", "m_first", "frequency")


@dataclasses.dataclass(frozen=True)
class Feeder:
    """``feed(builder, info, chunk)``: decode one chunk of whole generations into a builder,
    as the one-core read does (``keep`` and ``need``: the event types and arguments to
    decode, see reader._decode_masks; a part's process is given them with its job)."""

    data: bytes
    buf: np.ndarray
    version: int
    source: str
    keep: np.ndarray
    need: np.ndarray

    def __call__(self, b: _tables.Builder, info: dict[str, Any], chunk: list[Generation]) -> None:
        for decoded in decode_chunk(self.data, self.buf, chunk, self.version, self.source, info, self.keep, self.need):
            b.feed(*decoded)
            del decoded
        b.flush()
        # freed memory back to the system once per chunk: after each piece it cost as much
        # as the read itself in page faults (a 38 MB trace: 1.0 s against 0.6 s), for a
        # peak a few MB lower
        trim()


def read_part(
    data: bytes,
    buf: np.ndarray,
    version: int,
    source: str,
    chunks: list[list[Generation]],
    want: frozenset[str],
    feed: Feeder,
    *,
    warm: Generation | None = None,
    start: dict[int, tuple[int, int, int]] | None = None,
    frequency: int | None = None,
    release: Callable[[int], None] | None = None,
) -> dict[str, Any] | None:
    """One part's builder state, from the threads' states ``start`` and the clock
    ``frequency`` the generations before it left, or those that reading ``warm`` (the
    generation before) alone gives; None if reading it would warn, or failed."""
    held: list[str] = []
    try:
        if start is None:
            w, winfo = _tables.Builder(want), {**new_info(), "quiet": []}
            feed(w, winfo, [warm] if warm is not None else [])
            start, frequency = w.m_state, winfo["frequency"]
            del w
        size = chunks[-1][-1].end - chunks[0][0].start
        b = _tables.Builder(want, size)
        b.m_state = dict(start)
        b.edge = Edge()
        # the clock's frequency as the generations before left it: a trace whose clock is not
        # Linux's warns once, at its first generation, not at each part's
        info = {**new_info(), "m_first": {}, "frequency": frequency, "quiet": held}
        for chunk in chunks:
            feed(b, info, chunk)
            if release is not None:
                release(chunk[-1].end)
    except GmpError:  # the one-core read raises it again, where it lies
        return None
    if held:
        return None
    return export(b, start, info)


def export(b: _tables.Builder, start: dict[int, tuple[int, int, int]], info: dict[str, Any]) -> dict[str, Any]:
    """What :func:`join` needs of a part's builder (``b.edge`` set before it read the part)
    that started its threads in the states ``start``, and of its ``info``."""
    e = b.edge
    assert e is not None
    e.seen = SeenIds()  # the part's own bookkeeping: nothing the join reads
    return {
        "run": b.run.finish(),
        "sweeps": b.sweeps.finish(),
        "heap": b.heap.finish(),
        "pending_run": b.pending_run,
        "pending_sweep": b.pending_sweep,
        "last_start": b.last_start,
        "carry": b.carry,
        "clashes": b.clashes,
        "few_parts": b.few_parts,
        "glob_parts": b.glob_parts,
        "names": b.names,
        "m_state": {m: b.m_state[m] for m in e.touched},
        "guess": {m: start.get(m, NO_STATE) for m in e.touched},
        "edge": e,
        "info": {k: info[k] for k in INFO_KEYS},
    }
