"""Locate or build the Go collector binaries (gmp-sampler, gmp-demoapp and its variants,
gmp-loadgen, gmp-tracedump, gmp-spinner)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ..errors import LabError

# built by ``go build ./cmd/...`` in the collectors module
CMDS = ("gmp-sampler", "gmp-demoapp", "gmp-loadgen", "gmp-tracedump", "gmp-spinner")
# the demo app built by modules of their own under collectors/ (the main module's go line
# and imports decide how the Go runtime picks GOMAXPROCS): program -> module directory
VARIANTS = {
    "gmp-demoapp-go124": "variants/go124",  # go 1.24 line: GOMAXPROCS = CPUs, limits ignored
    "gmp-demoapp-automaxprocs": "variants/automaxprocs",  # GOMAXPROCS = max(1, floor(quota/period))
}
PROGRAMS = CMDS + tuple(VARIANTS)


def collectors_dir() -> Path | None:
    """The collectors Go module: $GMP_COLLECTORS, or ``collectors/`` of a source checkout."""
    env = os.environ.get("GMP_COLLECTORS")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[2] / "collectors"
    return here if (here / "go.mod").exists() else None


def _source_hash(src: Path) -> str:
    """Every .go, go.mod and go.sum under the collectors directory, nested modules
    (demoapp/, variants/*) included."""
    h = hashlib.sha256()
    for p in sorted(src.rglob("*")):
        if p.is_file() and (p.suffix == ".go" or p.name in ("go.mod", "go.sum")):
            h.update(str(p.relative_to(src)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def find_go() -> str | None:
    """The go command: on PATH, or the standard install location."""
    return shutil.which("go") or next((g for g in ("/usr/local/go/bin/go",) if os.access(g, os.X_OK)), None)


def ensure_binaries(bin_dir: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Return {program: path}, building the collectors with ``go build`` when needed.

    Order: ``bin_dir`` or $GMP_BIN_DIR if given (prebuilt); else a build of the source
    checkout cached under ~/.cache/gmpanalysis/bin/<source hash>; else the programs on PATH.
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
                "the Go toolchain is needed to build the collectors (go not on PATH nor at "
                "/usr/local/go/bin/go); install Go >= 1.26 (collectors/go.mod) or set GMP_BIN_DIR to prebuilt binaries"
            )
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gmpanalysis" / "bin"
        out = cache / _source_hash(src)
        found = {p: out / p for p in PROGRAMS}
        if not all(os.access(f, os.X_OK) for f in found.values()):
            out.mkdir(parents=True, exist_ok=True)
            env = dict(os.environ, CGO_ENABLED="0")
            builds = [(src, [go, "build", "-o", str(out) + "/", "./cmd/..."])]
            builds += [(src / mod, [go, "build", "-o", str(out / prog), "."]) for prog, mod in VARIANTS.items()]
            for cwd, cmd in builds:
                r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    raise LabError(f"building the collectors in {cwd} failed:\n{r.stderr.strip()}")
        return found
    found_on_path = {p: shutil.which(p) for p in PROGRAMS}
    if all(found_on_path.values()):
        return {p: Path(f) for p, f in found_on_path.items() if f}
    raise LabError(
        "collector binaries not found: run from a source checkout (with collectors/), set "
        "GMP_COLLECTORS to the collectors module, or GMP_BIN_DIR to a directory of built binaries"
    )
