"""Give freed memory back to the system between the reader's steps."""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable

import numpy as np


def _malloc_trim() -> Callable[[], None]:
    """glibc keeps freed memory for reuse rather than return it, so the arrays of one step
    would stay in the process's resident size under the next one's; malloc_trim(0) hands
    them back (a no-op where there is no glibc)."""
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    return lambda: fn(0) and None


trim = _malloc_trim()


def _madvise() -> Callable[[int, int, int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return fn


_MADVISE = _madvise()
MADV_NOHUGEPAGE = 15  # Linux
PAGE = 4096


def small_pages(a: np.ndarray) -> None:
    """Back a large array that fills slowly with 4 KiB pages, not 2 MiB ones: with
    transparent huge pages on (Debian's default, or numpy's madvise on arrays of 4 MiB and
    more), each page first written brings in 2 MiB, so every column growing row by row
    holds up to 2 MiB it does not use. A hint: ignored where madvise is not there."""
    if _MADVISE is None or a.nbytes < 4 * PAGE:
        return
    lo = -(-a.ctypes.data // PAGE) * PAGE
    hi = (a.ctypes.data + a.nbytes) // PAGE * PAGE
    if hi > lo:
        _MADVISE(lo, hi - lo, MADV_NOHUGEPAGE)


class PageDropper:
    """Called with an offset, drops the pages of a read-only file mapping before it from this
    process once they are read (they are the file's own and clean: touched again, they come
    back from the page cache). Only for a mapping of the reader's own (``mmap.ACCESS_READ``):
    on a private one, dropped pages would read back as zeros."""

    def __init__(self, mm: mmap.mmap) -> None:
        self.mm = mm
        self.released = 0

    def __call__(self, offset: int) -> None:
        end = offset // mmap.PAGESIZE * mmap.PAGESIZE
        if end > self.released:
            self.mm.madvise(mmap.MADV_DONTNEED, self.released, end - self.released)
            self.released = end

    def drop_all(self) -> None:
        """Every page out of this process now, the offsets still to be released as before
        (pages read again come back, and go with the next call)."""
        self.mm.madvise(mmap.MADV_DONTNEED)
