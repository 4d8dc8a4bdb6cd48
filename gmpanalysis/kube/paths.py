"""Names from the API server turned into safe path components.

A bundle's directory is named after the target's namespace, pod and container as the API
server sends them. A real API server only stores DNS-1123 names, but a hostile or buggy one
(or a proxy in between) can send anything: ``../x``, ``/etc``, NUL, 300 characters. Each name
is made one harmless path component before it is joined to ``--out``; meta.json keeps the
name as sent.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ..errors import CollectError

# what Kubernetes itself allows in a namespace, pod or container name (DNS-1123 subdomain)
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX = 63  # per name: three names and a stamp stay well below NAME_MAX (255 bytes)


def safe_component(name: object) -> str:
    """``name`` as one path component: unchanged when it is a valid Kubernetes name of at
    most 63 characters, else its safe characters (others as '_', no leading dot, at most 54
    of them) followed by '~' and 8 hex digits of its SHA-256, so that two different hostile
    names never share a directory. Never empty, never '.', '..', never holds '/' or NUL."""
    text = str(name)
    if len(text) <= _MAX and _DNS1123.match(text) and text not in (".", ".."):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    stem = _UNSAFE.sub("_", text).lstrip(".")[: _MAX - 9]
    return f"{stem or '_'}~{digest}"


def bundle_dir(out: str | Path, namespace: object, pod: object, container: object, stamp: str) -> Path:
    """The bundle directory ``out/<namespace>-<pod>-<container>-<stamp>``, each name made a
    safe component; raises CollectError if the result is not directly inside ``out`` (which a
    safe component cannot cause: the check stands guard over this function itself)."""
    name = "-".join(safe_component(x) for x in (namespace, pod, container)) + f"-{safe_component(stamp)}"
    base = Path(out)
    path = base / name
    if path.parent != base or path.name != name or name in (".", ".."):
        raise CollectError(f"bundle directory name {name!r} would leave {base}; this is a bug, please report it")
    return path
