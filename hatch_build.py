"""Build hook: what an installed gmpanalysis needs beyond its Python modules.

The wheel gets two build outputs derived from the source tree, neither of them committed:

- ``gmpanalysis/examples.zip``: the example run bundles (``EXAMPLE_RUNS`` from
  ``fixtures/runs``), LZMA-compressed, byte-for-byte the same for the same input (sorted
  members, fixed timestamps and modes). ``gmpanalysis.examples`` unpacks it into the user's
  cache on first use.
- ``gmpanalysis/_collectors``: the Go sources of the collectors (every module under
  ``collectors/``: go.mod, go.sum and the non-test .go files), which ``gmpanalysis.lab``
  builds with the local Go toolchain when a lab run needs the binaries.

The sdist gets the example bundles' directories, so that a wheel built from the sdist
carries the same examples. This file owns the list of example runs.

An editable install gets neither: it reads the checkout's fixtures and collectors directly.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# the runs the notebooks use: a GOMAXPROCS sweep at 0.5 CPU and the allocation-heavy run
EXAMPLE_RUNS = ("cpu-0.5cpu-gmp1", "cpu-0.5cpu-gmp2", "cpu-0.5cpu-gmp8", "alloc-0.5cpu-gmp8")
RUNS_DIR = "fixtures/runs"
COLLECTORS_DIR = "collectors"
COLLECTORS_TARGET = "gmpanalysis/_collectors"
EXAMPLES_TARGET = "gmpanalysis/examples.zip"
# the earliest time a zip header can hold: members carry no trace of when they were built
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def collector_sources(root: Path) -> list[Path]:
    """The files ``go build`` reads in the collectors tree, relative to it: the one selection
    in gmpanalysis/lab/sources.py, loaded by path (the package's own imports need numpy and
    pandas, which a build environment does not have)."""
    spec = importlib.util.spec_from_file_location("_gmp_sources", root / "gmpanalysis" / "lab" / "sources.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_inputs(root / COLLECTORS_DIR)


def write_examples_zip(runs_dir: Path, names: tuple[str, ...], dest: Path) -> None:
    """Zip the bundles ``runs_dir/<name>`` as ``<name>/<file>`` members, deterministically."""
    with zipfile.ZipFile(dest, "w") as z:
        for name in sorted(names):
            bundle = runs_dir / name
            if not (bundle / "meta.json").is_file():
                raise FileNotFoundError(
                    f"{bundle}: example run bundle missing (needs meta.json); the wheel is built from a "
                    "source checkout or an sdist, which carry fixtures/runs/{" + ",".join(names) + "}"
                )
            for f in sorted(p for p in bundle.rglob("*") if p.is_file()):
                info = zipfile.ZipInfo(f.relative_to(runs_dir).as_posix(), date_time=ZIP_EPOCH)
                info.compress_type = zipfile.ZIP_LZMA
                info.create_system = 3  # Unix, so the mode below is read as one
                info.external_attr = 0o644 << 16
                z.writestr(info, f.read_bytes())


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        if self.target_name == "sdist":
            for name in EXAMPLE_RUNS:
                build_data["force_include"][str(root / RUNS_DIR / name)] = f"{RUNS_DIR}/{name}"
            return
        if self.target_name != "wheel" or version == "editable":
            return
        self._tmp = Path(tempfile.mkdtemp(prefix="gmpanalysis-build-"))
        zip_path = self._tmp / "examples.zip"
        write_examples_zip(root / RUNS_DIR, EXAMPLE_RUNS, zip_path)
        build_data["force_include"][str(zip_path)] = EXAMPLES_TARGET
        sources = collector_sources(root)
        if not any(rel.as_posix() == "go.mod" for rel in sources):
            raise FileNotFoundError(f"{root / COLLECTORS_DIR}: the collectors' Go module (go.mod) is missing")
        for rel in sources:
            build_data["force_include"][str(root / COLLECTORS_DIR / rel)] = f"{COLLECTORS_TARGET}/{rel.as_posix()}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
