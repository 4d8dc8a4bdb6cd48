"""What a read says of a damaged trace: a cut in a generation, a tail of zero bytes, a last
generation the runtime never closed, threads' clocks that went back (warnings and meta)."""

from __future__ import annotations

import warnings
from typing import Any

from ..errors import ClockWarning, TruncatedTraceWarning
from .wire import GenerationSplitter


def damage_meta(splitter: GenerationSplitter) -> dict[str, Any]:
    """meta's ``truncated`` (the cut's offset), ``zero_tail`` (where the zeros begin) and
    ``unclosed`` (the last generation the runtime never closed, left out: generation and
    offset), each None where there is none."""
    u = splitter.unclosed
    return {
        "truncated": splitter.truncated_at,
        "zero_tail": splitter.zero_tail,
        "unclosed": None if u is None else {"generation": u[0], "offset": u[1]},
    }


def warn_damage(source: str, size: int, splitter: GenerationSplitter, info: dict[str, Any]) -> None:
    """After a read: a cut in a generation, a tail of zero bytes or a last generation never
    closed, and threads' clocks that went back."""
    truncated_at, zeros, unclosed = splitter.truncated_at, splitter.zero_tail, splitter.unclosed
    if truncated_at is not None or zeros is not None:
        if zeros is not None:
            how = (
                f"ends in {size - zeros} zero bytes from offset {zeros} (what a file system leaves of data a "
                "crash kept from reaching the disk)"
            )
        elif unclosed is not None:
            how = (
                f"ends before its last generation ({unclosed[0]}, from offset {unclosed[1]}) was closed: the "
                "runtime closes a generation with its stack and string tables (from Go 1.26, and an end marker), "
                "and the process stopped before (exited without trace.Stop, or the download was cut); that "
                "generation was left out"
            )
        else:
            how = f"ends inside a generation at offset {truncated_at} (of {size} bytes)"
        warnings.warn(
            f"{source}: trace {how}; the {info['generations_seen']} complete generation(s) before it were read",
            TruncatedTraceWarning,
            stacklevel=4,
        )
    back = info["clock_steps_back"]
    if back:
        at, m, ns_back = back[0]
        warnings.warn(
            f"{source}: a thread's clock goes back at {len(back)} batch start(s), first at offset {at} "
            f"(thread {m}, by {ns_back} ns); those events were held at the thread's last time. "
            "The runtime never writes this: the trace is damaged there",
            ClockWarning,
            stacklevel=4,
        )
