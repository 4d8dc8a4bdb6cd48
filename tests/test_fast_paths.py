"""The fast paths against what they stand for: what_if's frame built once from the replay's
arrays (its dtypes, and the estimator's figures the same from arrays as from the frame),
the fleet's bundle sizes from one listing, the one test of a stop-the-world pause across a
frozen boundary, and the level caches (derived again for new inputs, any level name)."""

from __future__ import annotations

import dataclasses
import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gmpanalysis as gmp
from gmpanalysis import whatif as W
from gmpanalysis.compare import stall_ms_per_s
from gmpanalysis.levels import level_names, level_run
from gmpanalysis.periodtrace import across_boundary

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "fixtures" / "runs"
NESTED = RUNS / "nested-0.5cpu-pod0.5-gmp2"
CLOSED = REPO.parent / "shared" / "data" / "16cpu-v2" / "light-250m-gmp1"

DTYPES = {
    "period": "int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "quota_us": "float64",
    "usage_us": "float64",
    "throttled": "bool",
    "exhausted_at_us": "float64",
    "stall_us": "float64",
    "frozen_us": "float64",
    "frozen_other_us": "float64",
    "cpus_throttled": "float64",
    "requests": "int64",
    "latency_p50_ms": "float64",
    "latency_p99_ms": "float64",
    "stw": "float64",
    "stw_stretched": "float64",
}


def _load(p: Path) -> gmp.Run:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gmp.load_run(p)


def _usage_demand(run: gmp.Run) -> gmp.Run:
    """The run without requests or trace: the replay's demand comes from its usage."""
    return dataclasses.replace(run, trace_path=None, requests=None, _trace=None)


def _cases() -> list:
    out = [pytest.param(p, False, id=p.name) for p in (RUNS / "cpu-0.5cpu-gmp8", NESTED)]
    out.append(pytest.param(RUNS / "cpu-0.5cpu-gmp8", True, id="usage-demand"))
    out.append(pytest.param(CLOSED, False, id="closed-loop"))
    return out


SETTINGS = [{}, {"quota_us": 25_000}, {"gomaxprocs": 8}, {"unlimited": True}]


@pytest.mark.parametrize(("path", "usage"), _cases())
def test_what_if_columns_keep_their_dtypes_and_summaries_agree(path, usage):
    """what_if's frame keeps its column dtypes (requests int64 even without requests, stw
    float even without a trace), and summarize of the frame equals the advisor's summary of
    the replay's columns (estimate at one tick phase)."""
    if not (path / "meta.json").exists():
        pytest.skip(f"{path} is not beside the checkout")
    run = _load(path)
    if usage:
        run = _usage_demand(run)
    for s in SETTINGS:
        per = gmp.what_if(run, tick_phase_ns=0, **s)
        assert {c: str(t) for c, t in per.dtypes.items()} == DTYPES, s
        if usage:
            assert per.attrs["model"]["demand"] == "usage" and (per["requests"] == 0).all()
        got = W.estimate(run, phases=1, **s)
        want = W.summarize(per)
        for k, v in want.items():
            assert got[k] == pytest.approx(v, nan_ok=True, rel=0, abs=0), (s, k)


def test_stall_rate_of_a_frame_and_of_its_columns_agree():
    per = gmp.what_if(_load(RUNS / "cpu-0.5cpu-gmp1"))
    cols = {c: per[c].to_numpy() for c in per.columns}
    assert stall_ms_per_s(per) == stall_ms_per_s(cols)
    assert math.isnan(stall_ms_per_s(per.iloc[:0])) and math.isnan(stall_ms_per_s({c: v[:0] for c, v in cols.items()}))


def _files_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.iterdir() if f.is_file())


@pytest.mark.parametrize("name", ["store", "odd #%20 é dir"])
def test_bundle_bytes_of_local_paths_and_file_urls(tmp_path, name):
    """list_bundles' bytes is the bundle's files' sizes for a path and its file:// URL (the
    listing's keys match the directories the glob gives), never a silent 0."""
    from gmpanalysis.fleet import list_bundles, put_bundle

    store = tmp_path / name
    put_bundle(RUNS / "cpu-0.5cpu-gmp1", store)
    want = _files_bytes(RUNS / "cpu-0.5cpu-gmp1")
    for src in (store, str(store) + "/", f"file://{store}"):
        ls = list_bundles(src)
        assert list(ls["bytes"]) == [want], src
        assert ls["bytes"].dtype == "int64"
    plain = tmp_path / f"{name}-plain"
    shutil.copytree(RUNS / "cpu-0.5cpu-gmp1", plain / "one")
    assert list(list_bundles(plain)["bytes"]) == [want]
    assert list(list_bundles(f"file://{plain / 'one'}")["bytes"]) == [want]


def test_bundle_bytes_of_a_memory_store():
    pytest.importorskip("fsspec")
    import uuid

    import fsspec

    from gmpanalysis.fleet import list_bundles, put_bundle

    root = f"memory://store-{uuid.uuid4().hex}"
    try:
        for n in ("cpu-0.5cpu-gmp1", "alloc-0.5cpu-gmp8"):
            put_bundle(RUNS / n, root)
        ls = list_bundles(root).set_index("workload")
        assert ls["bytes"].to_dict() == {n: _files_bytes(RUNS / n) for n in ("cpu-0.5cpu-gmp1", "alloc-0.5cpu-gmp8")}
    finally:
        fsspec.filesystem("memory").rm(root.split("://", 1)[1], recursive=True)


def _old_spans(s0, s1, end, thr):
    """periodtrace's two expressions before across_boundary took their place."""
    order = np.argsort(s0)
    rme = np.maximum.accumulate(s1[order])
    last = np.searchsorted(s0[order], end, side="left") - 1
    return (last >= 0) & (rme[np.maximum(last, 0)] > end) & thr.fillna(False).to_numpy(dtype=bool)


def test_across_boundary_is_the_old_test():
    rng = np.random.default_rng(7)
    for _ in range(2000):
        n, m = int(rng.integers(1, 6)), int(rng.integers(1, 8))
        s0 = rng.integers(0, 1000, n)
        s1 = s0 + rng.integers(0, 300, n)
        end = np.sort(rng.integers(0, 1300, m))
        thr = pd.Series(rng.choice([True, False, None], m), dtype="boolean")
        order = np.argsort(s0)
        rme = np.maximum.accumulate(s1[order])
        last = np.searchsorted(s0[order], end, side="left") - 1
        latest = np.where(last >= 0, rme[np.maximum(last, 0)], -1)
        assert np.array_equal(across_boundary(latest, end, thr), _old_spans(s0, s1, end, thr))
    # a throttled period with no pause begun before its end, and one begun at its end
    assert not across_boundary(np.array([-1]), np.array([100]), pd.Series([True]))[0]
    assert not _old_spans(np.array([100]), np.array([200]), np.array([100]), pd.Series([True]))[0]


def test_level_runs_follow_a_replaced_run():
    run = _load(NESTED)
    pod = level_run(run, "pod")
    assert level_run(run, "pod") is pod
    half = run.samples[run.samples["t_ns"] < run.samples["t_ns"].iloc[len(run.samples) // 2]]
    other = dataclasses.replace(run, samples=half.reset_index(drop=True))
    assert len(level_run(other, "pod").samples) < len(pod.samples)
    assert level_run(run, "pod") is pod
    run.samples = run.samples.copy()  # a new frame: derived again
    assert level_run(run, "pod") is not pod


def test_a_level_named_inputs(tmp_path):
    """A level may be named anything the samples' cgroup column holds, "inputs" too (the
    level cache keeps what it was derived from apart from the levels' names)."""
    d = tmp_path / "run"
    shutil.copytree(NESTED, d)
    for f in ("cpu_stat.csv", "limits.csv"):
        lines = (d / f).read_text().splitlines(keepends=True)
        (d / f).write_text("".join(x.replace(",pod,", ",inputs,").replace(",pod\n", ",inputs\n") for x in lines))
    (d / "meta.json").write_text((d / "meta.json").read_text().replace('"level": "pod"', '"level": "inputs"'))
    run = _load(d)
    assert level_names(run) == ["container", "inputs"]
    assert isinstance(level_run(run, "inputs"), gmp.Run)
    gmp.df_periods(run)


def test_a_store_whose_path_looks_like_a_pattern_or_is_a_filesystems_root(tmp_path):
    """A store in a directory named ``runs[1]`` lists its bundles (not read as a glob
    pattern), and so does one at the root of a filesystem (``memory://``: the partition
    values are the path's last segments, whatever the root)."""
    import fsspec

    from gmpanalysis.fleet import list_bundles, put_bundle
    from gmpanalysis.fleet.compute import processed

    odd = tmp_path / "runs[1]"
    for n in ("cpu-0.5cpu-gmp1", "alloc-0.5cpu-gmp8"):
        put_bundle(RUNS / n, odd)
    assert sorted(list_bundles(odd)["workload"]) == ["alloc-0.5cpu-gmp8", "cpu-0.5cpu-gmp1"]
    assert processed(str(odd)) == set()
    mem = fsspec.filesystem("memory")
    before = set(mem.ls("/", detail=False))
    try:
        put_bundle(RUNS / "cpu-0.5cpu-gmp1", "memory://")
        assert list(list_bundles("memory://")["workload"]) == ["cpu-0.5cpu-gmp1"]
    finally:
        for p in set(mem.ls("/", detail=False)) - before:
            mem.rm(p, recursive=True)
