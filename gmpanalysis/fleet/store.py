"""The bundle store: many run bundles, kept raw, and the tables derived from them.

A store is a directory, local or any fsspec URL (``s3://bucket/prefix`` with the s3fs
package), laid out in Hive partitions so that Parquet readers (pyarrow, Dask) see the
partition values as columns::

    STORE/bundles/cluster=C/namespace=N/workload=W/pod=P/capture=ID/   the bundle's files
    STORE/derived/periods/cluster=C/.../capture=ID/periods.parquet     df_periods, keyed
    STORE/derived/summary-v4/.../capture=ID/bundle.parquet             one summary row
                                           (bundle-partial.parquet: a bundle still being written)
    STORE/derived/advice-v1/.../capture=ID/advice.parquet              the advisor's answer
                                                                       (latest bundles only)

A bundle is stored as the collector wrote it (meta.json, cpu_stat.csv, trace.out, ...):
the store never rewrites raw data. Its meta.json, which makes it visible, is written last
and renamed into place, so a reader never sees half a bundle; storing the same capture
twice keeps the first, and another bundle under the same key is refused. Its key,
``C/N/W/P/ID``, names it in every derived table.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import BundleError, GmpWarning, NotFoundError
from ..location import BUNDLE_FILES, fs_of
from ..names import path_component
from ..services import workload_of

PARTS = ("cluster", "namespace", "workload", "pod", "capture")
BUNDLES = "bundles"
DERIVED = "derived"


def _safe(v: object, default: str) -> str:
    """A partition value: ``default`` for none, else the one path-component rule."""
    return default if v in (None, "") else path_component(v)


def newest_first(rows: pd.DataFrame) -> pd.DataFrame:
    """Bundle rows (with ``wall_start`` and ``capture``) from the newest to the oldest: by
    meta.json's wall_start as a time (any UTC offset), rows without one last, then by
    capture."""
    t = pd.to_datetime(rows["wall_start"].astype("string"), utc=True, errors="coerce", format="ISO8601")
    order = rows.assign(_t=t).sort_values(["_t", "capture"], ascending=False, na_position="last", kind="stable")
    return order.drop(columns="_t")


def bundle_parts(meta: dict[str, Any], cluster: str | None = None) -> dict[str, str]:
    """The partition values of a bundle from its meta.json: ``cluster`` (meta ``cluster``,
    else the one given, else "local"), ``namespace`` ("lab" for lab runs), ``workload``
    (:func:`workload_of`), ``pod`` (the run's name for lab runs) and ``capture`` (meta
    ``capture``, else the collection's start in UTC and a hash of what identifies it), each
    reduced to letters, digits and ``._-``."""
    lab = meta.get("source") == "lab"
    start = str(meta.get("wall_start") or "")
    stamp = re.sub(r"[^0-9]", "", start)[:14]
    ids = ("node", "pod_uid", "container_id", "name", "mono_start_ns", "wall_start")
    ident = "|".join(str(meta.get(k)) for k in ids)
    capture = meta.get("capture") or f"{stamp or 'unknown'}-{hashlib.sha256(ident.encode()).hexdigest()[:10]}"
    return {
        "cluster": _safe(meta.get("cluster") or cluster, "local"),
        "namespace": _safe(meta.get("namespace") or ("lab" if lab else None), "_"),
        "workload": _safe(workload_of(meta), "_"),
        "pod": _safe(meta.get("pod") or meta.get("name"), "_"),
        "capture": _safe(capture, "_"),
    }


def bundle_key(parts: dict[str, str]) -> str:
    """The key that names a bundle in the derived tables: ``cluster/namespace/workload/pod/capture``."""
    return "/".join(parts[p] for p in PARTS)


def partition_path(parts: dict[str, str]) -> str:
    return "/".join(f"{p}={parts[p]}" for p in PARTS)


def put_bundle(bundle: str | os.PathLike[str], store: str | os.PathLike[str], *, cluster: str | None = None) -> str:
    """Store a bundle directory (checked with :func:`gmpanalysis.load_run` first) and return
    where it now lives. A capture already in the store is left as it is (the same capture
    stored twice is one bundle; a different bundle under the same key is a
    :class:`BundleError`); meta.json goes last, so a crash leaves no bundle a reader takes
    for whole. A bundle whose meta.json lacks ``gomaxprocs_effective`` or ``go_version``
    (the node agent's, of a third-party binary) is stored with them filled from its trace,
    as ``collect`` fills them (:func:`gmpanalysis.goversion.facts_from_trace`)."""
    import json

    from ..bundle import load_run
    from ..goversion import facts_from_trace

    src = Path(bundle)
    load_run(src)  # a broken bundle is refused before it reaches the store, with the reader's message
    try:
        raw = mine = (src / "meta.json").read_bytes()
        meta = json.loads(mine)
    except (OSError, ValueError) as e:
        raise BundleError(f"{src / 'meta.json'}: {e}") from None
    # what a collector could not ask the process (the node agent: a third-party binary) and
    # its trace tells, filled as `collect` fills it (the stored meta.json only)
    if isinstance(meta, dict) and (meta.get("gomaxprocs_effective") is None or meta.get("go_version") is None):
        before = dict(meta)
        facts_from_trace(meta, src / "trace.out", log=lambda _msg: None)
        if meta != before:
            # ASCII escapes: a value may hold a lone surrogate (an undecodable byte)
            mine = (json.dumps(meta, indent=2) + "\n").encode()
    parts = bundle_parts(meta, cluster)
    fs, root = fs_of(store)
    dest = f"{root}/{BUNDLES}/{partition_path(parts)}"
    if fs.exists(f"{dest}/meta.json"):
        # the same capture: stored as it is, or as an earlier version stored it (before the
        # trace's facts were filled in)
        if fs.cat_file(f"{dest}/meta.json") not in (mine, raw):
            raise BundleError(
                f"{src}: the store already holds another bundle under {dest} (its meta.json differs; the "
                "partition values are reduced to letters, digits and ._-): give the capture its own meta.json "
                "capture or cluster"
            )
        return _url(store, dest)
    # meta.json is what makes a bundle visible (list_bundles, fetch_bundle look for it): the
    # other files go first, then meta.json under a hidden name renamed into place, so a
    # reader never takes half a bundle for a whole one; a second writer of the same capture
    # writes the same bytes
    fs.makedirs(dest, exist_ok=True)
    for name in BUNDLE_FILES:
        f = src / name
        if f.is_file() and name != "meta.json":
            fs.put_file(str(f), f"{dest}/{name}")
    tmp = f"{dest}/.meta.json.{uuid.uuid4().hex}.tmp"
    fs.pipe_file(tmp, mine)
    fs.mv(tmp, f"{dest}/meta.json")
    return _url(store, dest)


def finished_bundles(spool: str | os.PathLike[str]) -> tuple[list[Path], list[Path]]:
    """The bundles of a collector's output directory (gmp-agent's --out): the finished ones,
    directly under it, and those still being written (gmp-agent keeps a capture under
    ``.partial/`` until it ends, then renames it into place); bundles set aside under
    ``.failed/`` are neither."""
    root = Path(spool)
    if not root.is_dir():
        raise BundleError(f"{root}: not a directory; give bundle directories or a directory of them")

    def bundles(d: Path) -> list[Path]:
        if not d.is_dir():
            return []
        return sorted(p for p in d.iterdir() if not p.name.startswith(".") and (p / "meta.json").is_file())

    # an empty spool (all moved to the store, or nothing captured yet) is no error
    return bundles(root), bundles(root / ".partial")


def _url(store: str | os.PathLike[str], path: str) -> str:
    s = str(store)
    if "://" not in s:
        return path
    proto = s.split("://", 1)[0]
    return f"{proto}://{path}"


def glob_root(root: str) -> str:
    """``root`` as the literal start of a glob pattern: a directory named ``runs[1]`` is not
    a pattern (fsspec reads ``*``, ``?`` and ``[`` as glob syntax)."""
    import glob

    return glob.escape(root)


def _dir_bytes(fs: Any, root: str, depth: int | None = None) -> dict[str, int]:
    """Every directory under ``root`` (to ``depth`` levels of files) with the sizes of the
    files directly in it summed: one recursive listing (an object store's list calls, not a
    request per bundle)."""
    out: dict[str, int] = {}
    for path, info in fs.find(root, maxdepth=depth, detail=True).items():
        d = path.rsplit("/", 1)[0]
        out[d] = out.get(d, 0) + int(info.get("size") or 0)
    return out


def list_bundles(sources: str | os.PathLike[str] | list[str | os.PathLike[str]]) -> pd.DataFrame:
    """The bundles of a store, or of plain bundle directories (a directory holding
    meta.json, or one whose subdirectories do, as ``report`` takes them).

    Columns: ``key`` (:func:`bundle_key`), ``path`` (where the bundle lives: a path or URL),
    the partition values ``cluster``, ``namespace``, ``workload``, ``pod``, ``capture``,
    and ``bytes`` (its files' sizes summed, from one listing of each source: what the fleet
    starts first); one row per bundle, sorted by key. Two sources holding the same key give
    one row (the first), with a :class:`GmpWarning` naming both."""
    import json

    srcs = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    rows: list[dict[str, str]] = []
    for src in srcs:
        fs, root = fs_of(src)
        if not fs.exists(root):
            raise NotFoundError(f"{src}: no such store or bundle directory")
        if fs.exists(f"{root}/{BUNDLES}") and not fs.exists(f"{root}/meta.json"):
            sizes = _dir_bytes(fs, f"{root}/{BUNDLES}")
            pattern = f"{glob_root(root)}/{BUNDLES}/" + "/".join(f"{p}=*" for p in PARTS) + "/meta.json"
            for m in sorted(fs.glob(pattern)):
                d = m.rsplit("/", 1)[0]
                parts = dict(seg.split("=", 1) for seg in d.split("/")[-len(PARTS) :])
                rows.append({"key": bundle_key(parts), "path": _url(src, d), **parts, "bytes": sizes.get(d, 0)})
            continue
        sizes = _dir_bytes(fs, root, 2)  # a bundle here or in a directory just below
        if fs.exists(f"{root}/meta.json"):
            dirs = [root]
        else:
            dirs = sorted(m.rsplit("/", 1)[0] for m in fs.glob(f"{glob_root(root)}/*/meta.json"))
        if not dirs:
            raise NotFoundError(f"{src}: neither a store (no {BUNDLES}/ inside) nor a bundle directory (no meta.json)")
        for d in dirs:
            try:
                meta = json.loads(fs.cat_file(f"{d}/meta.json"))
            except (OSError, ValueError) as e:
                raise BundleError(f"{d}/meta.json: not readable as JSON ({e}); fix or remove that bundle") from None
            if not isinstance(meta, dict):
                raise BundleError(f"{d}/meta.json: not a JSON object; fix or remove that bundle")
            parts = bundle_parts(meta)
            rows.append({"key": bundle_key(parts), "path": _url(src, d), **parts, "bytes": sizes.get(d, 0)})
    # paths stay Python objects: a directory name may hold a lone surrogate (an undecodable
    # byte), which pandas' Arrow-backed strings refuse, and the path must open as it is
    seen: dict[str, str] = {}
    for r in rows:
        other = seen.setdefault(r["key"], r["path"])
        if other != r["path"]:
            warnings.warn(
                f"{r['path']}: the same key as {other} ({r['key']}); the first is kept. Two captures with one key "
                "are one capture stored twice, or names that differ only in characters a key cannot hold",
                GmpWarning,
                stacklevel=2,
            )
    df = pd.DataFrame([{k: v for k, v in r.items() if k != "path"} for r in rows], columns=["key", *PARTS, "bytes"])
    df["bytes"] = df["bytes"].astype("int64")
    df.insert(1, "path", pd.Series([r["path"] for r in rows], dtype=object, index=df.index))
    return df.drop_duplicates("key", keep="first").sort_values("key", kind="stable").reset_index(drop=True)
