"""Locate or build the Go collector binaries (gmp-sampler, gmp-demoapp and its variants,
gmp-loadgen, gmp-tracedump, gmp-spinner).

The Go sources come from a source checkout (``collectors/``) or, in an installed package,
from the copy the wheel carries (``gmpanalysis/_collectors``). Either is built once per
source content and Go version into the user's cache directory.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import LabError
from .sources import build_inputs

# built by ``go build ./cmd/...`` in the collectors module
CMDS = ("gmp-sampler", "gmp-demoapp", "gmp-loadgen", "gmp-tracedump", "gmp-spinner")
# the demo app built by modules of their own under collectors/ (the main module's go line
# and imports decide how the Go runtime picks GOMAXPROCS): program -> module directory
VARIANTS = {
    "gmp-demoapp-go124": "variants/go124",  # go 1.24 line: GOMAXPROCS = CPUs, limits ignored
    "gmp-demoapp-automaxprocs": "variants/automaxprocs",  # GOMAXPROCS = max(1, floor(quota/period))
}
PROGRAMS = CMDS + tuple(VARIANTS)

CHECKOUT_SOURCE = Path(__file__).resolve().parents[2] / "collectors"
PACKAGED_SOURCE = Path(__file__).resolve().parents[1] / "_collectors"
STANDARD_GO = "/usr/local/go/bin/go"


def collectors_dir() -> Path | None:
    """The collectors Go module: $GMP_COLLECTORS, else ``collectors/`` of a source checkout,
    else the sources an installed package carries; None if there is none."""
    env = os.environ.get("GMP_COLLECTORS")
    if env:
        return Path(env)
    for src in (CHECKOUT_SOURCE, PACKAGED_SOURCE):
        if (src / "go.mod").is_file():
            return src
    return None


def _build_inputs(src: Path) -> list[Path]:
    """What ``go build`` reads under ``src`` (absolute paths); the selection is sources.py's."""
    return [src / rel for rel in build_inputs(src)]


def _source_hash(src: Path, go_version: str = "") -> str:
    """Content hash of the build inputs and the Go version that builds them: the cache key."""
    h = hashlib.sha256(go_version.encode() + b"\0")
    for p in _build_inputs(src):
        h.update(p.relative_to(src).as_posix().encode() + b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def required_go(src: Path) -> str:
    """The ``go`` line of the collectors' go.mod (the oldest Go that builds them), e.g. "1.26.0"."""
    m = re.search(r"^go\s+(\S+)", (src / "go.mod").read_text(), re.MULTILINE)
    return m.group(1) if m else "?"


def find_go() -> str | None:
    """The go command: on PATH, or the standard install location."""
    return shutil.which("go") or (STANDARD_GO if os.access(STANDARD_GO, os.X_OK) else None)


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gmpanalysis" / "bin"


def _go_env() -> dict[str, str]:
    # static binaries; no go.work of the surroundings joins in, and no VCS stamp: the
    # binaries depend only on what the cache key hashes
    return dict(os.environ, CGO_ENABLED="0", GOWORK="off", GOFLAGS=(os.environ.get("GOFLAGS", "") + " -buildvcs=false"))


def _go_version(go: str, src: Path) -> str:
    """The Go version that builds ``src`` (the toolchain go.mod selects, if newer than ``go``)."""
    r = subprocess.run([go, "env", "GOVERSION"], cwd=src, env=_go_env(), capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not r.stdout.strip():
        raise LabError(f"'{go} env GOVERSION' in {src} failed:\n{r.stderr.strip()}")
    return r.stdout.strip()


def _build(go: str, src: Path, out: Path) -> None:
    """Build every program into ``out``: into a fresh directory beside it that is renamed
    when all builds succeeded, so ``out`` never holds a partial set."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
    except OSError as e:
        raise LabError(
            f"{out.parent}: cannot write the collectors' build cache there ({e.strerror}); set XDG_CACHE_HOME "
            "to a writable directory, or GMP_BIN_DIR to a directory of prebuilt collector binaries"
        ) from e
    try:
        builds = [(src, [go, "build", "-o", str(tmp) + "/", "./cmd/..."])]
        builds += [(src / mod, [go, "build", "-o", str(tmp / prog), "."]) for prog, mod in VARIANTS.items()]
        for cwd, cmd in builds:
            r = subprocess.run(cmd, cwd=cwd, env=_go_env(), capture_output=True, text=True)
            if r.returncode != 0:
                raise LabError(f"building the collectors in {cwd} failed:\n{r.stderr.strip()}")
        if out.exists():
            shutil.rmtree(out)  # an incomplete set left by an older version
        try:
            tmp.rename(out)
        except OSError:
            # another process finished the same build first: theirs is complete
            if not all(os.access(out / p, os.X_OK) for p in PROGRAMS):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_binaries(bin_dir: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Return {program: path}, building the collectors with ``go build`` when needed.

    Order: ``bin_dir`` or $GMP_BIN_DIR if given (prebuilt); else a build of the collectors'
    sources (see :func:`collectors_dir`) cached under
    ``$XDG_CACHE_HOME/gmpanalysis/bin/<hash of the sources and the Go version>``
    (``~/.cache`` without XDG_CACHE_HOME); else the programs on PATH. The first build
    downloads the Go modules the collectors use (through the Go module proxy or
    GOPROXY) and takes a minute or so.
    """
    explicit = bin_dir or os.environ.get("GMP_BIN_DIR")
    if explicit:
        d = Path(explicit)
        found = {p: d / p for p in PROGRAMS}
        missing = [p for p, f in found.items() if not os.access(f, os.X_OK)]
        if missing:
            raise LabError(
                f"{d}: missing collector binaries {', '.join(missing)}; build them with "
                f"'cd collectors && go build -o {d}/ ./cmd/...' and, in each of "
                + ", ".join(f"collectors/{m}" for m in VARIANTS.values())
                + f", 'go build -o {d}/<program> .' ({', '.join(VARIANTS)})"
            )
        return found
    src = collectors_dir()
    if src is not None:
        go = find_go()
        if go is None:
            raise LabError(
                f"the Go toolchain is needed to build the collectors from {src} (go is neither on PATH nor at "
                f"{STANDARD_GO}): install Go >= {required_go(src)} (https://go.dev/doc/install) and put it on "
                "PATH, or set GMP_BIN_DIR to a directory of prebuilt collector binaries "
                f"({', '.join(PROGRAMS)})"
            )
        gover = _go_version(go, src)
        out = _cache_root() / _source_hash(src, gover)
        found = {p: out / p for p in PROGRAMS}
        if not all(os.access(f, os.X_OK) for f in found.values()):
            print(
                f"gmpanalysis: building the collectors from {src} with {gover} into {out} "
                "(once per source and Go version)",
                file=sys.stderr,
                flush=True,
            )
            _build(go, src, out)
        return found
    found_on_path = {p: shutil.which(p) for p in PROGRAMS}
    if all(found_on_path.values()):
        return {p: Path(f) for p, f in found_on_path.items() if f}
    raise LabError(
        "collector binaries not found: no collectors' Go sources (a source checkout's collectors/, or "
        f"{PACKAGED_SOURCE} in an installed package: reinstall gmpanalysis), set GMP_COLLECTORS to the "
        "collectors module, or GMP_BIN_DIR to a directory of built binaries"
    )
