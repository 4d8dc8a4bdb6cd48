"""Which files of the collectors' tree ``go build`` reads.

One list for two users: the wheel's build hook (hatch_build.py, which loads this file by path,
without importing the package) ships exactly these files, and gmpanalysis.lab.binaries hashes
them for its build cache, so a checkout and an installed package of the same sources share
one build. Standard library only.
"""

from __future__ import annotations

from pathlib import Path


def build_inputs(src: Path) -> list[Path]:
    """go.mod, go.sum and the non-test .go files of every module under ``src`` (demoapp/,
    variants/* included), relative to ``src`` and sorted; bin/ and Go test data are not inputs."""
    out = []
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if not p.is_file() or rel.parts[0] == "bin" or "testdata" in rel.parts:
            continue
        if (p.suffix == ".go" and not p.name.endswith("_test.go")) or p.name in ("go.mod", "go.sum"):
            out.append(rel)
    return out
