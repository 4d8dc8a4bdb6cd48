"""Example run bundles to look at before recording any: real lab runs at a 0.5 CPU limit.

In a source checkout they are the shipped fixtures (``fixtures/runs``). An installed package
carries a few of them compressed (``gmpanalysis/examples.zip``, built from the same fixtures
when the wheel is built); they are unpacked once into the user's cache directory
(``$XDG_CACHE_HOME/gmpanalysis`` or ``~/.cache/gmpanalysis``), because a bundle is a directory
that the readers open by path.

``GMP_DATA`` points every notebook and the default input of the command at other data: a
directory of bundles, or a directory holding ``runs/`` (the layout of ``fixtures/``).

    import gmpanalysis as gmp
    run = gmp.example_run("cpu-0.5cpu-gmp8")
    runs = [gmp.example_run(f"cpu-0.5cpu-gmp{g}") for g in (1, 2, 8)]
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import MissingDataError

if TYPE_CHECKING:
    from .bundle import Run

PACKAGE = Path(__file__).resolve().parent
CHECKOUT_RUNS = PACKAGE.parent / "fixtures" / "runs"
ZIP = PACKAGE / "examples.zip"
DEFAULT = "cpu-0.5cpu-gmp8"


def _bundles(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if (p / "meta.json").is_file()) if d.is_dir() else []


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gmpanalysis"


def _unpacked(zip_path: Path) -> Path:
    """The zip's bundles unpacked under the cache, once per zip content (a new version of the
    package unpacks beside the old one); written to a temporary directory and renamed, so a
    reader never sees half an example."""
    digest = hashlib.sha256(zip_path.read_bytes()).hexdigest()[:16]
    root = _cache_root()
    dest = root / f"examples-{digest}"
    if _bundles(dest):
        return dest
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".examples-", dir=root))
    except OSError as e:
        raise MissingDataError(
            f"{root}: cannot unpack the example runs there ({e.strerror}); set XDG_CACHE_HOME to a writable directory"
        ) from e
    try:
        with zipfile.ZipFile(zip_path) as z:
            for info in z.infolist():
                target = (tmp / info.filename).resolve()
                if not target.is_relative_to(tmp.resolve()):
                    raise MissingDataError(f"{zip_path}: member {info.filename!r} points outside; reinstall")
            z.extractall(tmp)
        try:
            tmp.rename(dest)
        except OSError:
            # another process unpacked it first: theirs is complete, ours goes
            shutil.rmtree(tmp, ignore_errors=True)
    except zipfile.BadZipFile as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise MissingDataError(f"{zip_path}: not a readable zip ({e}); reinstall gmpanalysis") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def example_dir() -> Path:
    """The directory holding the example bundles (``GMP_DATA`` first, then a source checkout's
    fixtures, then the copy inside the installed package)."""
    env = os.environ.get("GMP_DATA")
    if env:
        d = Path(env).expanduser()
        for cand in (d / "runs", d):
            if _bundles(cand):
                return cand
        raise MissingDataError(
            f"GMP_DATA={env}: no run bundles there (a directory of bundles, each with a meta.json, "
            "or one holding runs/); unset GMP_DATA to use the example runs"
        )
    if _bundles(CHECKOUT_RUNS):
        return CHECKOUT_RUNS
    if ZIP.is_file():
        return _unpacked(ZIP)
    raise MissingDataError(
        f"no example runs: neither {CHECKOUT_RUNS} (a source checkout) nor {ZIP} (an installed wheel) exists; "
        "reinstall gmpanalysis from a wheel or sdist, or set GMP_DATA to a directory of bundles"
    )


def example_runs() -> list[Path]:
    """Every example bundle's directory, sorted by name."""
    return _bundles(example_dir())


def example_run(name: str = DEFAULT) -> Run:
    """Load one example bundle by name (default ``cpu-0.5cpu-gmp8``); the error lists the names."""
    from .bundle import load_run

    d = example_dir()
    p = d / name
    if not (p / "meta.json").is_file():
        names = ", ".join(b.name for b in _bundles(d))
        raise MissingDataError(f"{d}: no example run {name!r}; there are: {names}")
    return load_run(p)
