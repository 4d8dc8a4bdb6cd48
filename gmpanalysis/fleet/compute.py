"""Fleet analysis on Dask: every bundle's per-period table, computed once, in parallel.

Each bundle is one task: load it (fetched into a local cache when it lives at a URL),
build :func:`gmpanalysis.df_periods`, summarise it in one row, ask the what-if advisor
where it applies, and write both as Parquet under OUT in the store's partitions (the
periods first, the summary row last, each under a temporary name renamed into place). A
bundle counts as processed when its summary row exists, so a task run twice (a worker
lost mid-task, Dask retrying it) rewrites the same two files and the output still holds
every bundle once; a second ``fleet`` over the same OUT skips what is done.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ..errors import BundleError, GmpError, UsageError
from .store import BUNDLES, DERIVED, PARTS, fs_of, list_bundles, partition_path

PERIODS_DIR = "periods"
# the summary rows' layout version is in the directory's name: rows of an earlier layout
# (other columns, counts of other meaning) are neither read nor taken as processed
SUMMARY_DIR = "summary-v2"
REPORT = "report.html"

# the summary row of a bundle: its key and partitions, then these (units in the names)
SUMMARY_COLUMNS = [
    "key",
    *PARTS,
    "path",
    "error",
    "wall_start",
    "span_s",
    "trace_s",
    "periods",
    "active_periods",
    "throttled_periods",
    "unknown_periods",
    "frozen_cpu_s",
    "stall_s",
    "stall_known_s",
    "stw_spanning",
    "gomaxprocs",
    "limit_cpus",
    "ncpu",
    "advice",
    "advice_limit_cpus",
    "advice_gomaxprocs",
    "analysis_s",
]


def _require() -> tuple[Any, Any]:
    try:
        import distributed
        import pyarrow
    except ImportError:
        raise UsageError("fleet analysis needs Dask and pyarrow: pip install 'gmpanalysis[fleet]'") from None
    return distributed, pyarrow


def _write_parquet(df: pd.DataFrame, out: str, rel: str) -> None:
    """One Parquet file, landed under a temporary name and renamed into place."""
    fs, root = fs_of(out)
    dest = f"{root}/{rel}"
    d, name = dest.rsplit("/", 1)
    fs.makedirs(d, exist_ok=True)
    # hidden (a leading dot): Parquet dataset readers skip it if a killed task leaves it
    tmp = f"{d}/.{name}.{uuid.uuid4().hex}.tmp"
    df = df.copy(deep=False)
    df.attrs = {}  # pandas would write them as JSON metadata; the tables' attrs hold objects
    with fs.open(tmp, "wb") as f:
        df.to_parquet(f, index=False)
    fs.mv(tmp, dest)


def summarize_bundle(run: Any, per: pd.DataFrame) -> dict[str, Any]:
    """The summary row's figures from a run and its periods. The counts are
    :func:`gmpanalysis.compare.period_summary`'s, so with holes in the samples they still
    equal the kernel's counter deltas over the table (what ambiguous groups hold included):
    ``periods`` (every CFS period of the table: wall clock), ``active_periods``
    (nr_periods), ``throttled_periods`` (nr_throttled), ``unknown_periods`` (rows whose
    throttling the samples cannot tell); ``span_s`` the table's wall seconds;
    ``frozen_cpu_s`` CPU-seconds the group's run queues stood throttled (cpu.stat's
    throttled time, a sum over CPUs); ``stall_s`` wall seconds frozen by any level (Σ
    frozen_us, a pod's quota too; Σ stall_us for a table without it) over the
    ``stall_known_s`` seconds of periods that know it; ``stw_spanning`` stop-the-world
    pauses still open when a throttled period ended; ``gomaxprocs`` (in force at the start),
    ``limit_cpus`` (quota / period, NaN: none), ``ncpu``; ``wall_start`` (meta.json, ISO)
    and ``trace_s`` the seconds of periods the trace covers."""
    from ..compare import period_summary

    ps = period_summary(per)
    m = run.meta
    q, p = m.get("quota_us"), m.get("period_us")
    g = per["gomaxprocs"].dropna()
    frozen = (per["frozen_us"] if "frozen_us" in per else per["stall_us"]).to_numpy(dtype=np.float64)
    length = (per["end_ns"] - per["start_ns"]).to_numpy(dtype=np.float64) / 1e9
    # frozen_us is a number in every row (0 where no level froze), also in a hole's periods:
    # the periods that know it are those whose throttling is known
    known = np.isfinite(frozen) & per["throttled"].notna().to_numpy()
    traced = per["stw_count"].notna().to_numpy() if "stw_count" in per else np.zeros(len(per), dtype=bool)
    return {
        "wall_start": str(m.get("wall_start") or ""),
        "span_s": float(length.sum()),
        "trace_s": float(length[traced].sum()),
        "periods": int(ps["periods"]),
        "active_periods": int(ps["active_periods"]),
        "throttled_periods": int(ps["throttled_periods"]),
        "unknown_periods": int(ps["unknown_periods"]),
        "frozen_cpu_s": float(ps["throttled_rq_s"]),
        "stall_s": float(frozen[known].sum() / 1e6),
        "stall_known_s": float(length[known].sum()),
        "stw_spanning": int(per["stw_spans_boundary"].fillna(False).astype(bool).sum()),
        "gomaxprocs": float(g.iloc[0]) if len(g) else float(m.get("gomaxprocs_effective") or math.nan),
        "limit_cpus": q / p if isinstance(q, (int, float)) and isinstance(p, (int, float)) and p else math.nan,
        "ncpu": float(m.get("ncpu") or math.nan),
    }


def analyse_bundle(path: str, key: str, parts: dict[str, str], out: str) -> dict[str, Any]:
    """One task: a bundle's periods and summary row written under ``out``; returns the row.
    A bundle that cannot be analysed (a :class:`GmpError`: damaged, missing data) gives a
    row with its ``error`` and no periods: the fleet goes on."""
    import warnings

    from ..analysis import analyze
    from ..bundle import load_run
    from .store import fetch_bundle

    t0 = time.perf_counter()
    row: dict[str, Any] = {c: math.nan for c in SUMMARY_COLUMNS}
    row.update({"key": key, **parts, "path": path, "error": None, "advice": None})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = load_run(fetch_bundle(path) if "://" in path else path)
            per = analyze(run).periods.copy()
            row.update(summarize_bundle(run, per))
            row["advice"], row["advice_limit_cpus"], row["advice_gomaxprocs"] = _advice(run)
        per.insert(0, "bundle", key)
        for c in per.columns:  # Parquet keeps pandas' nullable types; plain objects become text
            if per[c].dtype == object:
                per[c] = per[c].astype("string")
        _write_parquet(per, out, f"{PERIODS_DIR}/{partition_path(parts)}/periods.parquet")
    except GmpError as e:  # the bundle itself: analysing it again gives the same answer
        row["error"] = str(e)
        fs, root = fs_of(out)
        stale = f"{root}/{PERIODS_DIR}/{partition_path(parts)}/periods.parquet"
        if fs.exists(stale):  # from an earlier run of a bundle that has since changed
            fs.rm(stale)
    # anything else (a lost connection to the store, a bug) propagates: Dask retries the
    # task, and the fleet names the bundles that still failed; they stay unprocessed
    row["analysis_s"] = time.perf_counter() - t0
    _write_parquet(_summary_frame([row]), out, f"{SUMMARY_DIR}/{partition_path(parts)}/bundle.parquet")
    return row


def _advice(run: Any) -> tuple[str | None, float, float]:
    """The advisor's sentence and setting for a run (objective: throttling), where the
    replay applies (a limited run with a CPU count)."""
    from ..advise import advise

    if run.meta.get("quota_us") is None or not run.meta.get("ncpu"):
        return None, math.nan, math.nan
    try:
        t = advise(run, objective="throttle")
    except GmpError:
        return None, math.nan, math.nan
    best = t.iloc[0]
    return str(t.attrs.get("recommendation")), float(best["limit_cpu"]), float(best["gomaxprocs"])


def _text(v: object) -> object:
    """Text Parquet can hold: a path's undecodable bytes (lone surrogates) as backslash escapes."""
    if not isinstance(v, str):
        return v
    return v.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _summary_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame([{k: _text(v) for k, v in r.items()} for r in rows], columns=SUMMARY_COLUMNS)
    for c in ("key", *PARTS, "path", "error", "advice", "wall_start"):
        df[c] = df[c].astype("string")
    for c in ("periods", "active_periods", "throttled_periods", "unknown_periods", "stw_spanning"):
        df[c] = pd.array(df[c].to_numpy(dtype=np.float64), dtype="Float64").round().astype("Int64")
    return df


def default_out(sources: list[str]) -> str:
    """OUT for a single store: its derived/ directory; plain bundle directories need one given."""
    if len(sources) == 1:
        fs, root = fs_of(sources[0])
        if fs.exists(f"{root}/{BUNDLES}") and not fs.exists(f"{root}/meta.json"):
            s = str(sources[0]).rstrip("/")
            return f"{s}/{DERIVED}"
    raise UsageError("fleet: give -o OUT (where the Parquet tables and the report go) for bundle directories")


def processed(out: str) -> set[str]:
    """The keys whose summary row is already under ``out``."""
    fs, root = fs_of(out)
    found = fs.glob(f"{root}/{SUMMARY_DIR}/" + "/".join(f"{p}=*" for p in PARTS) + "/bundle.parquet")
    keys = set()
    for f in found:
        segs = f[len(root) + len(SUMMARY_DIR) + 2 :].split("/")[: len(PARTS)]
        keys.add("/".join(s.split("=", 1)[1] for s in segs))
    return keys


def read_summary(out: str) -> pd.DataFrame:
    """Every summary row under ``out``, one per bundle, sorted by key (columns:
    :data:`SUMMARY_COLUMNS`)."""
    fs, root = fs_of(out)
    files = sorted(fs.glob(f"{root}/{SUMMARY_DIR}/**/bundle.parquet"))
    if not files:
        return _summary_frame([])
    frames = []
    for f in files:
        try:
            with fs.open(f, "rb") as h:
                frames.append(pd.read_parquet(h))
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise BundleError(
                f"{f}: not a readable summary row ({e}); remove it and run fleet again to recompute that bundle"
            ) from None
    df = pd.concat(frames, ignore_index=True)
    return df.sort_values("key", kind="stable").reset_index(drop=True)


def fleet(
    sources: str | os.PathLike[str] | list[str | os.PathLike[str]],
    out: str | os.PathLike[str] | None = None,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    progress: bool = True,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> pd.DataFrame:
    """Analyse every bundle of a store (or of bundle directories) not yet processed under
    ``out``, in parallel on Dask: a LocalCluster of ``workers`` processes (default: the
    CPUs) or the running cluster at ``scheduler`` (an address such as
    ``tcp://10.0.0.5:8786``; its workers must reach the bundles and ``out``). Writes the
    periods and summary rows as Parquet under ``out`` (default: the store's derived/) and
    the fleet report (``out``/report.html: :func:`gmpanalysis.fleet.report.to_fleet_report`),
    and returns every summary row there (:func:`read_summary`). ``on_result`` is called with
    each row as it lands."""
    distributed, _ = _require()
    srcs = [str(sources)] if isinstance(sources, (str, os.PathLike)) else [str(s) for s in sources]
    if not srcs:
        raise UsageError("fleet: give a store or bundle directories")
    out_s = str(out) if out is not None else default_out(srcs)
    bundles = list_bundles(srcs)
    done = processed(out_s)
    todo = bundles[~bundles["key"].isin(done)]
    if len(todo):
        _run(distributed, todo, out_s, scheduler, workers, progress, on_result)
    summary = read_summary(out_s)
    from .report import to_fleet_report

    to_fleet_report(summary, f"{out_s.rstrip('/')}/{REPORT}")
    return summary


def _run(
    distributed: Any,
    todo: pd.DataFrame,
    out: str,
    scheduler: str | None,
    workers: int | None,
    progress: bool,
    on_result: Callable[[dict[str, Any]], None] | None,
) -> None:
    import dask
    from tqdm.auto import tqdm

    cluster = None
    if scheduler is None:
        n = workers or os.cpu_count() or 1
        # Dask's statistical profiler keeps every cycle's call-stack profile in the worker:
        # over a fleet of bundles it grew a worker by ~1.2 MiB per bundle (VmRSS 260 -> 416
        # MiB over 128 bundles; flat at 260 without it). Workers of a running scheduler are
        # started by their owner: DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False there.
        with dask.config.set({"distributed.worker.profile.enabled": False}):
            cluster = distributed.LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
            )
    failed: list[tuple[str, str]] = []
    try:
        try:
            client = distributed.Client(cluster if cluster is not None else scheduler, timeout=30)
        except OSError as e:
            raise GmpError(f"fleet: cannot reach the Dask scheduler at {scheduler} ({e}); is it running?") from None
        with client:
            futs = {
                client.submit(
                    analyse_bundle,
                    r.path,
                    r.key,
                    {p: getattr(r, p) for p in PARTS},
                    out,
                    # one task per bundle and output: two fleets writing elsewhere do not share it
                    key=f"gmp-bundle-{_task_id(r.key, r.path, out)}",
                    retries=2,
                    pure=False,
                ): r.key
                for r in todo.itertuples(index=False)
            }
            bar = tqdm(total=len(futs), desc="fleet", unit="bundle", disable=not progress)
            for fut in distributed.as_completed(list(futs)):
                bar.update(1)
                try:
                    row = fut.result()
                except Exception as e:  # failed after Dask's retries (or its worker kept dying)
                    failed.append((futs[fut], f"{type(e).__name__}: {e}"))
                    continue
                if on_result is not None:
                    on_result(row)
            bar.close()
    finally:
        if cluster is not None:
            cluster.close()
    if failed:
        key, why = failed[0]
        raise GmpError(
            f"fleet: {len(failed)} bundle(s) failed after retries and stay unprocessed (the first, {key}: "
            f"{why[:300]}); the others are under {out}: run fleet again to retry them"
        )


def _task_id(*parts: str) -> str:
    """A stable id for a task (paths may hold undecodable bytes: hashed as bytes)."""
    import hashlib

    return hashlib.sha256("|".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:32]


def fleet_periods(out: str | os.PathLike[str]) -> Any:
    """Every processed bundle's per-period table as one Dask dataframe (the columns of
    :func:`gmpanalysis.df_periods`, a ``bundle`` key column, and the partition values),
    for the user's own queries. ``out`` is a fleet output (a store's derived/) or a store."""
    _require()
    import dask.dataframe as dd
    import pyarrow as pa
    import pyarrow.dataset as pds

    fs, root = fs_of(out)
    if fs.exists(f"{root}/{DERIVED}/{PERIODS_DIR}"):
        root = f"{root}/{DERIVED}"
    if not fs.exists(f"{root}/{PERIODS_DIR}"):
        raise UsageError(f"{out}: no {PERIODS_DIR}/ here: run `gmpanalysis fleet` first")
    s = str(out)
    url = f"{s.split('://', 1)[0]}://{root}" if "://" in s else root
    # partition values are names: text, even where they look like numbers ("007")
    part = pds.partitioning(pa.schema([(p, pa.string()) for p in PARTS]), flavor="hive")
    return dd.read_parquet(f"{url}/{PERIODS_DIR}", dataset={"partitioning": part})
