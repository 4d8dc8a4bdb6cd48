"""Where bundles live besides a local directory: any fsspec location (``s3://``,
``file://``, a store's URL). Below both the bundle reader (``load_run`` of a URL) and the
bundle store (:mod:`gmpanalysis.fleet.store`), which both fetch through it."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

from .errors import NotFoundError, UsageError

# the files of a bundle that are fetched and stored (anything else in the directory stays behind)
BUNDLE_FILES = ("meta.json", "cpu_stat.csv", "limits.csv", "host_stat.csv", "requests.csv", "trace.out")


def fs_of(url: str | os.PathLike[str]) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) of a store or bundle location."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise UsageError("the bundle store needs fsspec: pip install 'gmpanalysis[fleet]'") from None
    try:
        fs, path = url_to_fs(str(url))
    except (ImportError, ValueError) as e:  # an unknown protocol, or its package missing (s3fs)
        raise UsageError(f"{url}: cannot open this location ({e}); s3:// needs pip install s3fs") from None
    return fs, path.rstrip("/") or "/"


def fetch_bundle(url: str, cache: str | os.PathLike[str] | None = None) -> Path:
    """A bundle at an fsspec URL copied into a local cache directory (once per URL), for
    :func:`gmpanalysis.load_run`."""
    fs, path = fs_of(url)
    base = Path(cache or os.environ.get("GMP_CACHE") or Path.home() / ".cache" / "gmpanalysis" / "bundles")
    dest = base / hashlib.sha256(url.encode()).hexdigest()[:24]
    if (dest / "meta.json").is_file():
        return dest
    if not fs.exists(f"{path}/meta.json"):
        raise NotFoundError(f"{url}: no bundle there (no meta.json)")
    tmp = base / f".incoming-{uuid.uuid4().hex}"
    tmp.mkdir(parents=True, exist_ok=True)
    for name in BUNDLE_FILES:
        if fs.exists(f"{path}/{name}"):
            fs.get_file(f"{path}/{name}", str(tmp / name))
    try:
        tmp.rename(dest)
    except OSError:  # fetched meanwhile by another process: theirs stays
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        if not (dest / "meta.json").is_file():
            raise NotFoundError(f"{url}: could not be cached in {dest}; check that directory and retry") from None
    return dest
