"""The command's argument types (each says what it refuses and why) and its output
helpers: paths it will write, progress lines on stderr."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import UsageError


def progress(msg: str) -> None:
    """A progress line on stderr; one starting with a carriage return only on a terminal."""
    if msg.startswith("\r"):
        if sys.stderr.isatty():
            print(msg, end="", file=sys.stderr, flush=True)
        return
    if msg:
        print(msg, file=sys.stderr, flush=True)


def check_out_file(text: str, opt: str) -> Path:
    """The file a command will write, refused before any work when it cannot be one: an
    empty path, a directory, a parent that does not exist or is not a directory. (Writing
    can still fail, /dev/full say: the writer says so, naming the file.)"""
    if not text:
        raise UsageError(f"{opt} '': give the path of the file to write")
    p = Path(text)
    if p.is_dir():
        raise UsageError(f"{opt} {p}: is a directory; give a file path, e.g. {p / 'out'}")
    _check_parent(p, opt)
    return p


def check_not_inside(out: Path, inputs: Sequence[str | Path], opt: str) -> None:
    """Refuse an output file that is one of the data files of a bundle read (it would be
    overwritten by what is made from it); a new file beside them (a report) is fine."""
    from .location import BUNDLE_FILES

    # the file's own name, its directory resolved (a data file may be a link: resolving it
    # would take the name of what it points at)
    o = out.parent.resolve() / out.name
    for d in inputs:
        b = Path(d).resolve()
        if b.is_dir() and o.parent == b and o.name in BUNDLE_FILES:
            raise UsageError(f"{opt} {out}: the bundle {d}'s own {o.name}, the data read; write elsewhere")


def check_writable_dir(text: str, opt: str) -> None:
    """A local directory a command will write into, made and written once before any work
    (a URL is the store's to check): refused with the reason where it cannot be."""
    if "://" in text:
        return
    p = check_out_dir(text, opt, empty=False)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".gmp-write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"{opt} {p}: cannot write there ({e.strerror or e}); choose another directory") from None


def _check_parent(p: Path, opt: str) -> None:
    parent = p.parent
    if not parent.exists():
        up = next((a for a in parent.parents if a.exists()), None)
        if up is not None and not up.is_dir():
            raise UsageError(f"{opt} {p}: {up} is not a directory")
        raise UsageError(f"{opt} {p}: no such directory {parent}; create it first")
    if not parent.is_dir():
        raise UsageError(f"{opt} {p}: {parent} is not a directory")


def check_out_dir(text: str, opt: str, *, empty: bool) -> Path:
    """A directory a command will write into (created if missing): refused up front when
    something else is in its place or, with ``empty``, when it holds anything (bundles are
    never overwritten)."""
    if not text:
        raise UsageError(f"{opt} '': give a directory")
    p = Path(text)
    if p.exists():
        if not p.is_dir():
            raise UsageError(f"{opt} {p}: not a directory; give a directory (new, or empty)")
        if empty and any(p.iterdir()):
            raise UsageError(
                f"{opt} {p}: exists and is not empty; bundles are never overwritten: choose a new directory"
            )
        return p
    up = next((a for a in p.parents if a.exists()), None)
    if up is not None and not up.is_dir():
        raise UsageError(f"{opt} {p}: {up} is not a directory")
    return p


_INT = re.compile(r"-?(0|[1-9][0-9]*)")  # ASCII digits: int() would also take "١٢" or "1_000"


def int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: a decimal integer in [lo, hi]."""

    def parse(text: str) -> int:
        t = text.strip()
        if not _INT.fullmatch(t):
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
        v = int(t)
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{v} is out of range: {lo}..{hi if hi is not None else ''}")
        return v

    return parse


def float_in(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [lo, hi] ((lo, hi] with lo_open)."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        return _in_range(text, v, lo, hi, lo_open)

    return parse


def _in_range(text: str, v: float, lo: float, hi: float, lo_open: bool) -> float:
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if v < lo or (lo_open and v == lo) or v > hi:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: {'(' if lo_open else '['}{lo:g}, {hi:g}]")
    return v


def gomaxprocs_value(text: str) -> int | None:
    """--gomaxprocs: a positive integer, or 'unset'/'default' (the env variable not set)."""
    if text.strip().lower() in ("unset", "default"):
        return None
    return int_in(1, 1 << 20)(text)


def gomaxprocs_values(text: str) -> list[int | None]:
    """--gomaxprocs-values: a comma list of positive integers and 'unset'."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty list: give e.g. 1,2,8 or unset,2")
    try:
        return [gomaxprocs_value(v) for v in text.split(",")]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e} (give e.g. 1,2,8 or unset,2)") from None


def burst_shares(text: str) -> list[float]:
    """--bursts: a comma list of bursts as shares of the quota, 0 to 1 (0: none)."""
    try:
        return [float_in(0, 1)(v) for v in text.split(",")]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e} (give e.g. 0 or 0,0.5,1)") from None


def cgroup_parent(text: str) -> str:
    """--cgroup-parent: a path below the cgroup mount; it may not climb out of it."""
    from .lab.cgroups import check_cgroup_parent

    try:
        return check_cgroup_parent(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def existing_dir(text: str) -> str:
    """An argparse type: a directory that exists (the cgroup mount)."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory (the cgroup mount, e.g. /sys/fs/cgroup)")
    return text


def bundle_name(text: str) -> str:
    """--name: a bundle name, not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the bundle name may not be empty")
    return text


def duration(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a duration in seconds ("30", "30s", "500ms", "2m"), finite, in
    [lo, hi] ((lo, hi] with lo_open)."""

    def parse(text: str) -> float:
        t = text.strip().lower()
        try:
            if t.endswith("ms"):
                v = float(t[:-2]) / 1000
            elif t.endswith("m"):
                v = float(t[:-1]) * 60
            else:
                v = float(t[:-1]) if t.endswith("s") else float(t)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 30s, 2m)") from None
        return _in_range(text, v, lo, hi, lo_open)

    return parse
