"""Give freed memory back to the system between the reader's steps."""

from __future__ import annotations

import ctypes
from collections.abc import Callable


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
