"""The Go version a bundle records (meta.json ``go_version``: ``runtime.Version()``), read in
one place: the minor release decides the trace format and the GOMAXPROCS default rules."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# "go1.N", then a patch (".P"), a pre-release ("rc1", "beta2") or GOEXPERIMENTs after a space
# ("go1.25.0 X:greenteagc"); "devel go1.27-..." and other forms carry no release
_RELEASE = re.compile(r"go1\.(\d{1,4})(?=$|[.\s]|rc\d|beta\d)")


def go_minor(v: object) -> int | None:
    """N of a Go release "go1.N..." (None where ``v`` names none: a devel build, not a string)."""
    m = _RELEASE.match(v) if isinstance(v, str) else None
    return int(m.group(1)) if m else None


def go_version_from_header(version: int) -> str:
    """What a trace header tells of the Go release that wrote it. The header names the trace
    format, not the release: a release without a format change writes its predecessor's
    (1.24 writes "go 1.23 trace", 1.27 "go 1.26 trace"), so 1.23 means 1.23 or 1.24 and the
    newest format known may come from any later release too."""
    if version == 23:
        return "go1.23 or go1.24"
    if version >= 26:
        return f"go1.{version} or later"
    return f"go1.{version}"


def go_version_of(run: Any) -> str | None:
    """The Go version of a run: meta.json's (``runtime.Version()``), else as far as its
    trace's header tells (:func:`go_version_from_header`: a bundle of a process nobody could
    ask, the node agent's of a third-party binary), else None."""
    v = run.meta.get("go_version")
    if isinstance(v, str) and v:
        return v
    tr = run.trace if run.trace_path is not None else None
    version = tr.meta.get("version") if tr is not None else None
    return go_version_from_header(version) if isinstance(version, int) else None


def facts_from_trace(meta: dict[str, Any], path: Path, log: Callable[[str], None] = print) -> None:
    """Fill what the collector could not ask a third-party process and its trace tells:
    ``gomaxprocs_effective`` (the first ProcsChange: GOMAXPROCS when the trace began, which
    is the value at start unless the runtime changed it before) and ``go_version`` (as far
    as the header tells, :func:`go_version_from_header`). A cut trace still tells both; an
    unreadable one leaves them null and says why. ``facts_from_trace`` in meta names the
    source of each value filled."""
    need_procs = meta.get("gomaxprocs_effective") is None
    need_go = meta.get("go_version") is None
    if not (need_procs or need_go) or not path.exists() or path.stat().st_size == 0:
        return
    from .errors import GmpError, GmpWarning
    from .gotrace import read_trace

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", GmpWarning)  # a cut trace: its whole generations count
            tr = read_trace(path, tables=("gomaxprocs",))  # the header and the first ProcsChange
    except GmpError as e:
        log(f"{meta.get('pod')}: the trace does not tell GOMAXPROCS or the Go version: {e}")
        return
    told: dict[str, str] = {}
    if need_procs and len(tr.gomaxprocs):
        meta["gomaxprocs_effective"] = int(tr.gomaxprocs["procs"].iloc[0])
        told["gomaxprocs_effective"] = "the trace's first ProcsChange (GOMAXPROCS when the trace began)"
    if need_go:
        meta["go_version"] = go_version_from_header(int(tr.meta["version"]))
        told["go_version"] = f"the trace header ({tr.meta['header']!r} names the format, not the release)"
    if told:
        meta["facts_from_trace"] = told
