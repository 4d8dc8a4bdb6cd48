"""Names from the API server turned into safe path components.

A bundle's directory is named after the target's namespace, pod and container as the API
server sends them. A real API server only stores DNS-1123 names, but a hostile or buggy one
(or a proxy in between) can send anything: ``../x``, ``/etc``, NUL, 300 characters. Each name
is made one harmless path component before it is joined to ``--out``; meta.json keeps the
name as sent.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CollectError
from ..names import path_component


def safe_component(name: object) -> str:
    """``name`` as one path component, by the project's one rule
    (:func:`gmpanalysis.names.path_component`): a Kubernetes name, or a capture stamp, as it
    is; anything else its safe characters, '~' and 8 hex digits of its SHA-256, so that two
    different hostile names never share a directory."""
    return path_component(name)


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
