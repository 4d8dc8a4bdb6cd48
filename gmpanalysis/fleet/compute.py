"""Fleet analysis on Dask: every bundle's per-period table, computed once, in parallel.

Each bundle is one task: load it (fetched into a local cache when it lives at a URL),
build :func:`gmpanalysis.df_periods`, summarise it in one row, and write both as Parquet
under OUT in the store's partitions (the periods first, the summary row last, each under a
temporary name renamed into place). A bundle counts as processed when its summary row
exists, so a task run twice (a worker lost mid-task, Dask retrying it) rewrites the same
two files and the output still holds every bundle once; a second ``fleet`` over the same
OUT skips what is done.

The what-if advisor (most of a bundle's time: its replays) runs once per workload, on its
latest bundle with a limit (by meta.json wall_start), again one task each, started as soon
as none of the workload's bundles is left to analyse and ahead of the bundles still queued
(the long tasks overlap the short ones instead of trailing them all); where it does not
apply to that bundle, the next latest is asked, up to :data:`ADVICE_TRIES`. Its
answer is kept per bundle (a row under ``advice-v1/``, an empty one where it did not apply)
and asked again only when a newer bundle of the workload arrives.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import BundleError, GmpError, UsageError
from ..levels import ever_limited
from ..location import fs_of
from .pool import Pool
from .store import BUNDLES, DERIVED, PARTS, glob_root, list_bundles, newest_first, partition_path

PERIODS_DIR = "periods"
# the summary rows' layout version is in the directory's name: rows of an earlier layout
# (other columns, counts of other meaning) are neither read nor taken as processed
SUMMARY_DIR = "summary-v4"
ADVICE_DIR = "advice-v1"
REPORT = "report.html"
# the latest bundles of a workload the advisor is asked about, newest first, until one answers
ADVICE_TRIES = 3

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
    "analysis_s",
    "complete",
]
# the advisor's row of a bundle: its key, the sentence (null: the advisor did not apply), the
# setting it recommends and the seconds it took
ADVICE_COLUMNS = ["key", "advice", "advice_limit_cpus", "advice_gomaxprocs", "advice_s"]


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


def analyse_bundle(path: str, key: str, parts: dict[str, str], out: str) -> dict[str, Any]:
    """One task: a bundle's periods and summary row written under ``out``; returns the row.
    A bundle that cannot be analysed (a :class:`GmpError`: damaged, missing data) gives a
    row with its ``error`` and no periods: the fleet goes on. One no quota limited gets a
    row too (:func:`summarize_unlimited`), without periods."""
    from ..gotrace import parallel

    # the fleet runs a worker per CPU already: each reads its traces on one core (for the
    # task's thread alone: other tasks' threads, or a caller's own use, keep their setting)
    with parallel.on_one_core():
        return _analyse(path, key, parts, out)


def _analyse(path: str, key: str, parts: dict[str, str], out: str) -> dict[str, Any]:
    """The task of :func:`analyse_bundle`."""
    import warnings

    from ..analysis import analyze
    from ..bundle import load_run, read_meta
    from ..location import fetch_bundle
    from ..replayinputs import no_quota
    from .rows import summarize_bundle, summarize_unlimited

    t0 = time.perf_counter()
    row: dict[str, Any] = {c: math.nan for c in SUMMARY_COLUMNS}
    row.update({"key": key, **parts, "path": path, "error": None})
    per = None
    partial = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            local = fetch_bundle(path) if "://" in path else path
            # still being written (meta.json "complete": false, and no error: a collection
            # that ended early says why and is finished): analysed as it is, and again by
            # every fleet run until it is finished (its row is kept apart); read first, so
            # that one whose samples do not load yet is asked again too
            meta = read_meta(Path(local) / "meta.json")
            partial = meta.get("complete") is False and not meta.get("error")
            run = load_run(local)
            if no_quota(run):
                row.update(summarize_unlimited(run))
            else:
                per = analyze(run).periods.copy()
                row.update(summarize_bundle(run, per))
    except GmpError as e:  # the bundle itself: analysing it again gives the same answer
        row["error"] = str(e)
        per = None
    where = f"{PERIODS_DIR}/{partition_path(parts)}/periods.parquet"
    if per is None:
        fs, root = fs_of(out)
        if fs.exists(f"{root}/{where}"):  # from an earlier version of this bundle
            fs.rm(f"{root}/{where}")
    else:
        per.insert(0, "bundle", key)
        for c in per.columns:  # Parquet keeps pandas' nullable types; plain objects become text
            if per[c].dtype == object:
                per[c] = per[c].astype("string")
        _write_parquet(per, out, where)
    # anything else (a lost connection to the store, a bug) propagates: Dask retries the
    # task, and the fleet names the bundles that still failed; they stay unprocessed
    row["analysis_s"] = time.perf_counter() - t0
    fs, root = fs_of(out)
    advised = f"{root}/{ADVICE_DIR}/{partition_path(parts)}/advice.parquet"
    if fs.exists(advised):  # an answer about an earlier version of this bundle
        fs.rm(advised)
    row["complete"] = not partial
    here = f"{root}/{SUMMARY_DIR}/{partition_path(parts)}"
    name, other = (PARTIAL_ROW, ROW) if partial else (ROW, PARTIAL_ROW)
    if fs.exists(f"{here}/{other}"):  # the row of the bundle before it was finished: one row a bundle
        fs.rm(f"{here}/{other}")
    _write_parquet(summary_frame([row]), out, f"{SUMMARY_DIR}/{partition_path(parts)}/{name}")
    return row


def advise_bundle(path: str, key: str, parts: dict[str, str], out: str) -> dict[str, Any]:
    """One task: the advisor's row for a bundle (:data:`ADVICE_COLUMNS`), written under
    ``out``; a bundle the advisor does not apply to gives a row without a sentence, so it is
    not asked again. A bundle that no longer loads raises: no row, asked again next time."""
    import warnings

    from ..bundle import load_run
    from ..location import fetch_bundle

    t0 = time.perf_counter()
    row: dict[str, Any] = {"key": key, "advice": None, "advice_limit_cpus": math.nan, "advice_gomaxprocs": math.nan}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = load_run(fetch_bundle(path) if "://" in path else path)
        row["advice"], row["advice_limit_cpus"], row["advice_gomaxprocs"] = _advice(run)
    row["advice_s"] = time.perf_counter() - t0
    _write_parquet(advice_frame([row]), out, f"{ADVICE_DIR}/{partition_path(parts)}/advice.parquet")
    return row


def advice_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Advice rows as a frame of :data:`ADVICE_COLUMNS`, with the dtypes Parquet gives back."""
    df = pd.DataFrame([{k: _text(v) for k, v in r.items()} for r in rows], columns=ADVICE_COLUMNS)
    for c in ("key", "advice"):
        df[c] = df[c].astype("string")
    for c in ("advice_limit_cpus", "advice_gomaxprocs", "advice_s"):
        df[c] = df[c].astype("float64")  # as Parquet gives them back, rows or none
    return df


def advice_todo(summary: pd.DataFrame, advised: pd.DataFrame) -> pd.DataFrame:
    """The summary rows the advisor is to be asked about next: per workload (cluster,
    namespace, workload) without an answer yet, the latest of its bundles with a limit and a
    CPU count (:func:`~gmpanalysis.fleet.store.newest_first`) among the newest
    :data:`ADVICE_TRIES` that has no advice row. ``advised``: the advice rows so far
    (:func:`read_advice`)."""
    if summary.empty:
        return summary
    said = dict(zip(advised["key"], advised["advice"].notna(), strict=True))
    ok = summary[summary["error"].isna() & np.isfinite(summary["limit_cpus"]) & np.isfinite(summary["ncpu"])]
    picks = []
    for _, g in ok.groupby(["cluster", "namespace", "workload"], sort=False, dropna=False):
        for i, r in enumerate(newest_first(g).itertuples(index=False)):
            if i >= ADVICE_TRIES or said.get(r.key):
                break  # answered (the newest answer stands), or asked often enough
            if r.key not in said:
                picks.append(r._asdict())
                break
    return pd.DataFrame(picks, columns=summary.columns)


def _advice(run: Any) -> tuple[str | None, float, float]:
    """The advisor's sentence and setting for a run (objective: throttling), where the
    replay applies (a limited run with a CPU count)."""
    from ..advise import advise

    if not ever_limited(run) or not run.meta.get("ncpu"):
        return None, math.nan, math.nan
    try:
        t = advise(run, objective="throttle", bursts=(0.0,))  # the fleet reports limit and GOMAXPROCS
    except GmpError:
        return None, math.nan, math.nan
    if t.empty:
        return None, math.nan, math.nan
    best = t.iloc[0]
    return str(t.attrs.get("recommendation")), float(best["limit_cpu"]), float(best["gomaxprocs"])


def _text(v: object) -> object:
    """Text Parquet can hold: a path's undecodable bytes (lone surrogates) as backslash escapes."""
    if not isinstance(v, str):
        return v
    return v.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# a bundle's summary row, and the row of one still being written (analysed again next time)
ROW, PARTIAL_ROW = "bundle.parquet", "bundle-partial.parquet"


def summary_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Summary rows as a frame of :data:`SUMMARY_COLUMNS`, with the dtypes Parquet gives back."""
    df = pd.DataFrame([{k: _text(v) for k, v in r.items()} for r in rows], columns=SUMMARY_COLUMNS)
    for c in ("key", *PARTS, "path", "error", "wall_start"):
        df[c] = df[c].astype("string")
    for c in ("periods", "active_periods", "throttled_periods", "unknown_periods", "stw_spanning"):
        df[c] = pd.array(df[c].to_numpy(dtype=np.float64), dtype="Float64").round().astype("Int64")
    df["complete"] = df["complete"].astype("boolean")
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
    """The keys whose summary row is already under ``out`` (a bundle still being written
    has its row apart, :data:`PARTIAL_ROW`, and is analysed again)."""
    fs, root = fs_of(out)
    found = fs.glob(f"{glob_root(root)}/{SUMMARY_DIR}/" + "/".join(f"{p}=*" for p in PARTS) + f"/{ROW}")
    keys = set()
    for f in found:
        segs = f.split("/")[-len(PARTS) - 1 : -1]
        keys.add("/".join(s.split("=", 1)[1] for s in segs))
    return keys


def _read_rows(out: str, sub: str, name: str, what: str) -> list[pd.DataFrame]:
    fs, root = fs_of(out)
    frames = []
    for f in sorted(fs.glob(f"{glob_root(root)}/{sub}/**/{name}")):
        try:
            with fs.open(f, "rb") as h:
                frames.append(pd.read_parquet(h))
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise BundleError(
                f"{f}: not a readable {what} row ({e}); remove it and run fleet again to recompute that bundle"
            ) from None
    return frames


def read_advice(out: str) -> pd.DataFrame:
    """Every advice row under ``out`` (columns: :data:`ADVICE_COLUMNS`), one per bundle asked."""
    frames = _read_rows(out, ADVICE_DIR, "advice.parquet", "advice")
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="string" if c in ("key", "advice") else float) for c in ADVICE_COLUMNS})
    return pd.concat(frames, ignore_index=True)


def read_summary(out: str) -> pd.DataFrame:
    """Every summary row under ``out``, one per bundle (its finished row, or the row of it
    still being written), sorted by key, with the advisor's
    answer where it was asked (columns: :data:`SUMMARY_COLUMNS`, then ``advice``,
    ``advice_limit_cpus``, ``advice_gomaxprocs``, ``advice_s``: null/NaN for bundles not
    asked, :func:`advise_bundle`)."""
    return _with_advice(_summary_rows(out), read_advice(out))


def _summary_rows(out: str) -> pd.DataFrame:
    frames = [*_read_rows(out, SUMMARY_DIR, ROW, "summary"), *_read_rows(out, SUMMARY_DIR, PARTIAL_ROW, "summary")]
    return pd.concat(frames, ignore_index=True) if frames else summary_frame([])


def _with_advice(rows: pd.DataFrame, advice: pd.DataFrame) -> pd.DataFrame:
    df = rows.merge(advice, on="key", how="left")
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
    periods and summary rows as Parquet under ``out`` (default: the store's derived/), then
    asks the what-if advisor once per workload whose latest bundle has no answer yet
    (:func:`advice_todo`, :func:`advise_bundle`), writes the fleet report
    (``out``/report.html: :func:`gmpanalysis.fleet.report.to_fleet_report`), and returns
    every summary row there with its advice (:func:`read_summary`). ``on_result`` is called
    with each summary row as it lands."""
    distributed, _ = _require()
    srcs = [str(sources)] if isinstance(sources, (str, os.PathLike)) else [str(s) for s in sources]
    if not srcs:
        raise UsageError("fleet: give a store or bundle directories")
    out_s = str(out) if out is not None else default_out(srcs)
    bundles = list_bundles(srcs)
    done = processed(out_s)
    todo = bundles[~bundles["key"].isin(done)]
    pool = Pool(distributed, scheduler, workers)
    sched = _Schedule(pool, out_s, bundles, progress, on_result)
    try:
        failed, unadvised = sched.run(todo)
    finally:
        pool.close()
    if failed:
        key, why = failed[0]
        raise GmpError(
            f"fleet: {len(failed)} bundle(s) failed after retries and stay unprocessed (the first, {key}: "
            f"{why[:300]}); the others are under {out_s}: run fleet again to retry them"
        )
    summary = sched.summary()  # what is now under out_s, kept as it was written (not read back)
    from .report import to_fleet_report

    to_fleet_report(summary, f"{out_s.rstrip('/')}/{REPORT}")
    if unadvised:
        key, why = unadvised[0]
        raise GmpError(
            f"fleet: the advisor failed on {len(unadvised)} bundle(s) after retries (the first, {key}: {why[:300]}); "
            f"the report {out_s.rstrip('/')}/{REPORT} is written without their advice: run fleet again to retry them"
        )
    return summary


WORKLOAD = ["cluster", "namespace", "workload"]
# With tasks still pending and no worker at all for this long, the fleet stops waiting: the
# tasks are cancelled and named as failed (a worker's nanny restarts a dead worker; with
# none left, Dask would wait for workers forever). A cluster at a scheduler address may be
# scaling up from zero, so it gets longer.
NO_WORKER_S = {"local": 120.0, "scheduler": 600.0}
WATCH_EVERY_S = 5.0

# Dask runs higher priorities first: an advisor run (a second or more of replays) starts as
# soon as its workload's bundles are analysed, ahead of the queued bundles, so the long
# tasks overlap the short ones instead of trailing them all
ADVICE_PRIORITY = 10


class _Schedule:
    """The tasks of one fleet run on Dask: every bundle to analyse, and for each workload,
    once none of its bundles is left to analyse, the advisor on the pick of
    :func:`advice_todo` (its next pick when a pick gets no answer). Each task is retried
    twice by Dask; the keys and errors of those that still failed are returned."""

    def __init__(
        self,
        pool: Pool,
        out: str,
        bundles: pd.DataFrame,
        progress: bool,
        on_result: Callable[[dict[str, Any]], None] | None,
    ) -> None:
        self.pool, self.out, self.on_result = pool, out, on_result
        # the paths as listed: a summary row holds a path as text (undecodable bytes escaped)
        self.listed = dict(zip(bundles["key"], bundles["path"], strict=True))
        self.progress = progress
        self.rows: dict[tuple, dict[str, dict[str, Any]]] = {}  # workload -> key -> summary row
        for r in _summary_rows(out).to_dict("records"):
            # as analyse_bundle returned it: missing values None, not pandas' NA
            self.rows.setdefault(_workload(r), {})[r["key"]] = _plain(r)
        advised = read_advice(out)
        self.said = dict(zip(advised["key"], advised["advice"].notna(), strict=True))
        self.advice = {r["key"]: _plain(r) for r in advised.to_dict("records")}
        self.left: dict[tuple, int] = {}  # workload -> bundles still to analyse
        self.tasks: dict[Any, tuple[str, str, tuple]] = {}  # future -> (kind, key, workload)
        self.failed: list[tuple[str, str]] = []
        self.unadvised: list[tuple[str, str]] = []
        self.done: Any = None  # the futures as they complete (made with the first task: no task, no cluster)
        self.no_workers_s: float | None = None  # set when the watch gave up waiting for a worker

    def run(self, todo: pd.DataFrame) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        from tqdm.auto import tqdm

        for r in todo.itertuples(index=False):
            self.left[_workload(r._asdict())] = self.left.get(_workload(r._asdict()), 0) + 1
            # analysing a bundle again removes the answer about its earlier version
            self.said.pop(r.key, None)
            self.advice.pop(r.key, None)
        self.bar = tqdm(total=len(todo), desc="fleet", unit="bundle", disable=not self.progress)
        # the biggest first (Dask runs tasks of one priority in the order given): an hour-long
        # capture left to the end would run alone while the other workers idle
        for r in submission_order(todo).itertuples(index=False):
            self._submit(analyse_bundle, "bundle", r.key, r.path, r._asdict(), 0)
        for w in self.rows:
            if not self.left.get(w):  # nothing of it to analyse: it may still want an answer
                self._advise(w)
        stop = threading.Event()
        watch = threading.Thread(target=self._watch_workers, args=(stop,), name="gmp-fleet-watch", daemon=True)
        if self.done is not None:
            watch.start()
        try:
            self._collect()
        finally:
            stop.set()
        self.bar.close()
        return self.failed, self.unadvised

    def _watch_workers(self, stop: threading.Event) -> None:
        """While tasks are pending: with no worker at all for NO_WORKER_S, cancel them (the
        result loop then names each as failed, saying why)."""
        limit = NO_WORKER_S["local" if self.pool.scheduler is None else "scheduler"]
        client = self.pool.client()
        since: float | None = None
        while not stop.wait(WATCH_EVERY_S):
            try:
                workers = len(client.scheduler_info().get("workers", {}))
            except Exception:  # the scheduler itself unreachable: Dask's own errors say so
                continue
            if workers:
                since = None
                continue
            since = time.monotonic() if since is None else since
            if time.monotonic() - since >= limit:
                self.no_workers_s = limit
                client.cancel(list(self.tasks.copy()))  # (a copy: the result loop changes it)
                return

    def _collect(self) -> None:
        """Each task's result as it completes; a workload's advice asked for once none of its
        bundles is left."""
        for fut in self.done if self.done is not None else ():
            kind, key, w = self.tasks.pop(fut)
            try:
                row = fut.result()
            except Exception as e:  # failed after Dask's retries (or its worker kept dying)
                why = f"{type(e).__name__}: {e}"
                if self.no_workers_s is not None and fut.cancelled():
                    why = (
                        f"cancelled: no Dask worker was left for {self.no_workers_s:.0f} s (killed, out of memory, "
                        "or never started); start workers and run fleet again"
                    )
                (self.failed if kind == "bundle" else self.unadvised).append((key, why))
                row = None
            if kind == "bundle":
                self.bar.update(1)
                self.left[w] -= 1
                if row is not None:
                    self.rows.setdefault(w, {})[key] = row
                    if self.on_result is not None:
                        self.on_result(row)
            else:  # asked: answered, or not (then the next pick is asked)
                self.said[key] = row is not None and row["advice"] is not None
                if row is not None:
                    self.advice[key] = row
            if not self.left.get(w):
                self._advise(w)

    def summary(self) -> pd.DataFrame:
        """Every summary row with its advice, as :func:`read_summary` reads them back."""
        rows = [r for w in self.rows.values() for r in w.values()]
        return _with_advice(summary_frame(rows), advice_frame(list(self.advice.values())))

    def _submit(self, task: Callable[..., dict[str, Any]], kind: str, key: str, path: Any, r: dict, prio: int) -> None:
        if self.no_workers_s is not None:  # given up on the workers: not asked of the cluster
            self.unadvised.append((key, f"not run: no Dask worker was left for {self.no_workers_s:.0f} s"))
            return
        fut = self.pool.client().submit(
            task,
            path,
            key,
            {p: r[p] for p in PARTS},
            self.out,
            # one task per bundle and output: two fleets writing elsewhere do not share it
            key=f"gmp-{kind}-{_task_id(key, path, self.out)}",
            retries=2,
            pure=False,
            priority=prio,
        )
        self.tasks[fut] = (kind, key, _workload(r))
        if self.done is None:
            self.done = self.pool.distributed.as_completed()
        self.done.add(fut)

    def _advise(self, w: tuple) -> None:
        if any(t[0] == "advice" and t[2] == w for t in self.tasks.values()):
            return  # one question per workload at a time
        rows = summary_frame(list(self.rows.get(w, {}).values()))
        asked = pd.DataFrame(
            {"key": list(self.said), "advice": ["yes" if v else None for v in self.said.values()]}, dtype="string"
        )
        for pick in advice_todo(rows, asked).to_dict("records"):
            # object, not text: a path may hold undecodable bytes (lone surrogates)
            self._submit(
                advise_bundle, "advice", pick["key"], self.listed.get(pick["key"], pick["path"]), pick, ADVICE_PRIORITY
            )


def submission_order(todo: pd.DataFrame) -> pd.DataFrame:
    """The bundles in the order the fleet hands them to its workers: the most bytes first
    (:func:`~gmpanalysis.fleet.list_bundles`' ``bytes``), then by key."""
    if "bytes" not in todo:
        return todo
    return todo.sort_values(["bytes", "key"], ascending=[False, True], kind="stable")


def _plain(r: dict[str, Any]) -> dict[str, Any]:
    """A row read back from Parquet as its task returned it: missing values None, not pandas' NA."""
    return {k: None if v is pd.NA else v for k, v in r.items()}


def _workload(r: dict[str, Any]) -> tuple:
    return tuple(r[c] for c in WORKLOAD)


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
