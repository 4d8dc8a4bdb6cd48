"""The Go version a bundle records (meta.json ``go_version``: ``runtime.Version()``), read in
one place: the minor release decides the trace format and the GOMAXPROCS default rules."""

from __future__ import annotations

import re

# "go1.N", then a patch (".P"), a pre-release ("rc1", "beta2") or GOEXPERIMENTs after a space
# ("go1.25.0 X:greenteagc"); "devel go1.27-..." and other forms carry no release
_RELEASE = re.compile(r"go1\.(\d{1,4})(?=$|[.\s]|rc\d|beta\d)")


def go_minor(v: object) -> int | None:
    """N of a Go release "go1.N..." (None where ``v`` names none: a devel build, not a string)."""
    m = _RELEASE.match(v) if isinstance(v, str) else None
    return int(m.group(1)) if m else None
