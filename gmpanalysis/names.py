"""Names turned into one harmless path component: the one rule for bundle directories
(collect, the node agent) and the store's partition values.

A name of at most 63 letters, digits and ``._-`` that does not start with a dot is kept as
it is (every Kubernetes name, a capture stamp like ``20261126T221359Z``). Anything else (a
hostile API server's ``../x``, NUL, 300 characters, a space) becomes its safe characters
(others as ``_``, leading dots dropped, at most 54) followed by ``~`` and 8 hex digits of the
SHA-256 of its UTF-8 bytes: never empty, never ``.`` or ``..``, never a ``/``, and two
different names never share a component (a kept name has no ``~``). The Go node agent
implements the same rule (collectors/cmd/gmp-agent, safeName); both are tested against
tests/data/names.json.
"""

from __future__ import annotations

import hashlib
import re

MAX = 63  # per name: several names and a stamp stay well below NAME_MAX (255 bytes)
_KEEP = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,62}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def path_component(name: object) -> str:
    """``name`` as one path component (see the module doc)."""
    text = str(name)
    if _KEEP.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    stem = _UNSAFE.sub("_", text).lstrip(".")[: MAX - 9]
    return f"{stem or '_'}~{digest}"
