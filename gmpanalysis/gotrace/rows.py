"""Rows of one table, held as columns that grow in place, each row with a lasting id.

The running table of a long trace is most of what reading it costs in memory, so its
rows are written once into the columns the table is made of: each column is reserved at
the size a hint gives (pages never written are never backed by memory) and handed to the
table as it is at the end, with no concatenation and no second copy. A row keeps an id
while it is held (later generations close intervals, and label the goroutine a thread
started, by id); rows taken out early (``take``) leave the rest moved to the front, and
ids still find them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .memory import small_pages


class RowStore:
    """Columns of these dtypes; ``append`` blocks of rows, address rows by id.

    Column views from :meth:`col` are valid until the next ``append``, ``take`` or
    ``finish`` (a column may move when it grows)."""

    def __init__(self, dtypes: dict[str, np.dtype | str | type], capacity: int = 0) -> None:
        self.dtypes = {k: np.dtype(t) for k, t in dtypes.items()}
        self._cap = max(int(capacity), 1024)
        try:
            self._cols = {k: _reserve(self._cap, t) for k, t in self.dtypes.items()}
        except MemoryError:  # the system will not lend that much address space: grow instead
            self._cap = 1024
            self._cols = {k: _reserve(self._cap, t) for k, t in self.dtypes.items()}
        self.n = 0
        # rows [0, k) were kept by a take: their ids, ascending; rows [k, n) were appended
        # since, with ids new0, new0 + 1, ...
        self._kept = np.zeros(0, dtype=np.int64)
        self._new0 = 0

    @property
    def next_id(self) -> int:
        return self._new0 + self.n - len(self._kept)

    def col(self, k: str) -> np.ndarray:
        return self._cols[k][: self.n]

    def append(self, cols: dict[str, np.ndarray], done: Callable[[np.ndarray], None] | None = None) -> int:
        """Add rows (every column, equal lengths); the id of the first. ``done`` is given each
        column of ``cols`` once it is copied."""
        m = len(next(iter(cols.values())))
        first = self.next_id
        if self.n + m > self._cap:
            # past the reservation: grow by half, one column at a time
            cap = max(self.n + m, self._cap + self._cap // 2)
            for k, a in self._cols.items():
                b = _reserve(cap, a.dtype)
                b[: self.n] = a[: self.n]
                self._cols[k] = b
                del a, b
            self._cap = cap
        for k, a in self._cols.items():
            a[self.n : self.n + m] = cols[k]
            if done is not None:
                done(cols[k])
        self.n += m
        return first

    def permute(self, lo: int, perm: np.ndarray) -> None:
        """Reorder the rows from position ``lo`` on: row ``lo + i`` becomes what row
        ``lo + perm[i]`` was. Ids go with positions: the caller maps its references."""
        for a in self._cols.values():
            a[lo : self.n] = a[lo : self.n][perm]

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Where the rows of these ids are now (-1: taken, or never held)."""
        ids = np.asarray(ids, dtype=np.int64)
        k = len(self._kept)
        pos = np.where(ids >= self._new0, k + ids - self._new0, -1)
        pos[pos >= self.n] = -1
        old = np.flatnonzero(ids < self._new0)
        if old.size:
            at = np.searchsorted(self._kept, ids[old])
            hit = at < k
            hit[hit] = self._kept[at[hit]] == ids[old][hit]
            pos[old[hit]] = at[hit]
        return pos

    def ids(self) -> np.ndarray:
        """The id of every row held, in row order."""
        k = len(self._kept)
        return np.r_[self._kept, np.arange(self._new0, self._new0 + self.n - k, dtype=np.int64)]

    def take(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        """Copies of the rows where ``mask``; the others move to the front, ids kept."""
        keep = ~mask
        out = {k: a[: self.n][mask] for k, a in self._cols.items()}
        kept_ids = self.ids()[keep]
        nk = len(kept_ids)
        for a in self._cols.values():
            a[:nk] = a[: self.n][keep]
        self._new0 = self.next_id
        self._kept = kept_ids
        self.n = nk
        return out

    def finish(self) -> dict[str, np.ndarray]:
        """Every column, as long as the rows; the store is empty after."""
        out = {}
        for k, a in self._cols.items():
            if a.flags.owndata and a.base is None:
                # no view of it is held (col() views are not kept): shrink in place, which
                # for a large mapped block gives the unused reservation back without a copy
                a.resize(self.n, refcheck=False)
                out[k] = a
            else:
                out[k] = a[: self.n].copy()
        self._cols = {k: np.empty(1024, dtype=t) for k, t in self.dtypes.items()}
        self._cap, self.n = 1024, 0
        self._kept = np.zeros(0, dtype=np.int64)
        self._new0 = 0
        return out

    def retype(self, k: str, dtype: np.dtype | str | type) -> None:
        """Hold column ``k`` in a wider type from now on."""
        old = self._cols[k]
        new = _reserve(self._cap, dtype)
        new[: self.n] = old[: self.n]
        self._cols[k] = new
        self.dtypes[k] = np.dtype(dtype)


def _reserve(n: int, dtype: np.dtype | str | type) -> np.ndarray:
    a = np.empty(n, dtype=dtype)
    small_pages(a)
    return a
