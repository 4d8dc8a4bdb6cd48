"""The bundle store and the fleet analysis on Dask: real Dask (a local cluster of worker
processes, and a scheduler and two workers started as separate processes, one of them
killed mid-run), real bundles from fixtures/."""

from __future__ import annotations

import copy
import json
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import stop_procs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gmpanalysis as gmp
from gmpanalysis import degrade as D
from gmpanalysis.fleet import df_fleet_workloads, fleet, fleet_periods, list_bundles, put_bundle
from gmpanalysis.fleet.compute import ADVICE_TRIES, advice_todo, read_advice, read_summary
from gmpanalysis.fleet.rows import summarize_bundle
from gmpanalysis.fleet.store import BUNDLES, newest_first
from gmpanalysis.location import fetch_bundle
from gmpanalysis.periods import df_conservation

RUNS = Path("fixtures/runs")
SOME = ("cpu-0.5cpu-gmp1", "cpu-0.5cpu-gmp2", "alloc-0.5cpu-gmp8")


def _load(p: str | Path) -> gmp.Run:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gmp.load_run(p)


def test_bundles_are_listed_with_their_bytes_and_handed_out_biggest_first(tmp_path):
    """list_bundles' bytes is what the bundle's files hold (the store's copy and the original
    directory alike; a capture that grew lists bigger), and the fleet submits the biggest
    first, then by key."""
    from gmpanalysis.fleet.compute import submission_order

    store = tmp_path / "store"
    for n in SOME:
        put_bundle(RUNS / n, store)
    ls = list_bundles(store)
    for r in ls.itertuples():
        assert r.bytes == sum(f.stat().st_size for f in Path(r.path).iterdir() if f.is_file()) > 0
    plain = list_bundles([RUNS / n for n in SOME]).set_index("key")["bytes"]
    assert plain.to_dict() == ls.set_index("key")["bytes"].to_dict()
    big = next(Path(p) for p in ls["path"])
    with (big / "cpu_stat.csv").open("a") as f:
        f.write("\n" * 10_000_000)  # as if the capture had run on: the sizes are all a listing reads
    again = list_bundles(store)
    first = submission_order(again).iloc[0]
    assert Path(first["path"]) == big and first["bytes"] == again["bytes"].max()
    rest = submission_order(again).iloc[1:]
    assert list(rest["bytes"]) == sorted(rest["bytes"], reverse=True)


def test_store_holds_bundles_once_and_loads_them(tmp_path, monkeypatch):
    store = tmp_path / "store"
    paths = [put_bundle(RUNS / n, store) for n in SOME]
    assert paths == [put_bundle(RUNS / n, store) for n in SOME]  # the same capture twice: one bundle
    ls = list_bundles(store)
    assert len(ls) == 3 and ls["key"].is_unique
    row = ls[ls["pod"] == "cpu-0.5cpu-gmp2"].iloc[0]
    assert (row["cluster"], row["namespace"], row["workload"]) == ("local", "lab", "cpu-0.5cpu-gmp2")
    where = "cluster=local/namespace=lab/workload=cpu-0.5cpu-gmp2/pod=cpu-0.5cpu-gmp2/capture="
    assert f"/{BUNDLES}/{where}" in row["path"]
    # the keys come from meta.json: the same whether listed from the store or the directories
    assert set(list_bundles([RUNS / n for n in SOME])["key"]) == set(ls["key"])
    assert not list(store.rglob(".*.tmp"))  # meta.json went last, renamed into place
    # a stored bundle loads as the original did, from its path and from a URL
    orig = _load(RUNS / "cpu-0.5cpu-gmp2")
    monkeypatch.setenv("GMP_CACHE", str(tmp_path / "cache"))
    for where in (row["path"], f"file://{row['path']}"):
        run = _load(where)
        pd.testing.assert_frame_equal(run.samples, orig.samples)
        pd.testing.assert_frame_equal(run.requests, orig.requests)
    got = fetch_bundle(f"file://{row['path']}", tmp_path / "other-cache")
    assert (got / "meta.json").read_bytes() == (RUNS / "cpu-0.5cpu-gmp2" / "meta.json").read_bytes()
    # another bundle under a key already taken is refused; listing two such is warned about
    other = tmp_path / "other"
    shutil.copytree(RUNS / "cpu-0.5cpu-gmp2", other)
    meta = json.loads((other / "meta.json").read_text())
    meta["note"] = "a different bundle, the same identity"
    (other / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(gmp.BundleError, match="already holds another bundle"):
        put_bundle(other, store)
    with pytest.warns(gmp.GmpWarning, match="the same key as"):
        assert len(list_bundles([RUNS / "cpu-0.5cpu-gmp2", other])) == 1
    # a broken bundle is refused with the reader's message, and nothing of it is stored
    bad = tmp_path / "bad"
    shutil.copytree(RUNS / "cpu-0.5cpu-gmp1", bad)
    (bad / "cpu_stat.csv").write_text("t_ns,read_ns\n1,2\n")
    with pytest.raises(gmp.BundleError, match="cpu_stat.csv"):
        put_bundle(bad, store)
    assert len(list_bundles(store)) == 3


def test_workload_from_kubernetes_pod_names():
    from gmpanalysis.fleet.store import bundle_parts

    base = {"source": "kube", "namespace": "shop", "wall_start": "2026-11-24T01:02:03Z", "node": "n1"}
    assert bundle_parts({**base, "pod": "checkout-7d9c8b6f5d-x2k4q"})["workload"] == "checkout"
    assert bundle_parts({**base, "pod": "ledger-0"})["workload"] == "ledger"
    assert bundle_parts({**base, "pod": "agent-x2k4q"})["workload"] == "agent"
    assert bundle_parts({**base, "pod": "checkout-7d9c8b6f5d-x2k4q", "workload": "co"})["workload"] == "co"
    # the controller gmp-agent read from the API wins over the pod name's shape
    rs = {"kind": "ReplicaSet", "name": "checkout-v2-7d9c8b6f5d", "pod_template_hash": "7d9c8b6f5d"}
    assert bundle_parts({**base, "pod": "checkout-v2-7d9c8b6f5d-x2k4q", "owner": rs})["workload"] == "checkout-v2"
    # the node agent's own name of the workload (its rate limits' key) wins over both
    named = {"agent": {"workload": "shop/checkout-v2/app"}, "owner": rs, "pod": "x-7d9c8b6f5d-x2k4q"}
    assert bundle_parts({**base, **named})["workload"] == "checkout-v2"
    job = {"kind": "Job", "name": "nightly-29123"}
    assert bundle_parts({**base, "pod": "nightly-29123-abcde", "owner": job})["workload"] == "nightly-29123"
    p = bundle_parts({**base, "pod": "a/../b", "cluster": "prod eu"})
    # unsafe names become one harmless component by the one rule (gmpanalysis.names)
    assert p["pod"].startswith("a_.._b~") and p["cluster"].startswith("prod_eu~")
    assert p["capture"].startswith("20261124010203-")


def test_store_put_of_a_collectors_output_directory(tmp_path, capsys):
    """`store put --move DIR` of gmp-agent's --out: the finished bundles are stored and
    removed, one still being written (under .partial/) is left for the next put, a broken
    one is named and set aside while the others are stored; an emptied spool is no error."""
    from gmpanalysis.cli import main

    spool = tmp_path / "spool"
    shutil.copytree(RUNS / SOME[0], spool / SOME[0])
    shutil.copytree(RUNS / SOME[1], spool / ".partial" / SOME[1])
    shutil.copytree(RUNS / SOME[2], spool / "broken")
    (spool / "broken" / "cpu_stat.csv").write_text("t_ns,read_ns\n1,2\n")
    assert main(["store", "put", "--move", "--store", str(tmp_path / "store"), str(spool)]) == 1
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and "still being written" in err and SOME[1] in err
    assert "broken" in err and "cpu_stat.csv" in err and "set aside" in err and "the others are stored" in err
    assert list(list_bundles(tmp_path / "store")["pod"]) == [SOME[0]]
    assert not (spool / SOME[0]).exists() and (spool / ".partial" / SOME[1]).exists()
    assert not (spool / "broken").exists() and (spool / ".failed" / "broken" / "meta.json").exists()
    # the next put (a periodic job) finds nothing new: no error
    assert main(["store", "put", "--move", "--store", str(tmp_path / "store"), str(spool)]) == 0
    assert capsys.readouterr().out == ""
    # another broken bundle of the same name: set aside beside the first, neither lost
    shutil.copytree(spool / ".failed" / "broken", spool / "broken")
    assert main(["store", "put", "--move", "--store", str(tmp_path / "store"), str(spool)]) == 1
    assert "set aside" in capsys.readouterr().err
    assert len([p for p in (spool / ".failed").iterdir() if (p / "meta.json").exists()]) == 2
    assert main(["store", "put", "--store", str(tmp_path / "store"), str(tmp_path / "no-such")]) != 0
    assert "not a directory" in capsys.readouterr().err


def _rows(*spec: tuple[str, str, str, float]) -> pd.DataFrame:
    """Summary rows (workload, capture, wall_start, limit_cpus) of one cluster and namespace."""
    return pd.DataFrame(
        [
            {"key": f"c/n/{w}/p/{cap}", "cluster": "c", "namespace": "n", "workload": w, "pod": "p",
             "capture": cap, "path": f"/{cap}", "error": None, "wall_start": ws, "limit_cpus": lim, "ncpu": 2.0}
            for w, cap, ws, lim in spec
        ]
    )  # fmt: skip


def _advised(*answers: tuple[str, str | None]) -> pd.DataFrame:
    return pd.DataFrame({"key": [k for k, _ in answers], "advice": pd.array([a for _, a in answers], dtype="string")})


def test_the_advisor_is_asked_once_per_workload_newest_first():
    """Per workload: the latest bundle with a limit; where the advisor does not apply, the
    next latest, up to ADVICE_TRIES; an answer stands until a newer bundle arrives."""
    s = _rows(
        ("a", "x1", "2026-01-01T00:00", 0.5),
        ("a", "x3", "2026-01-03T00:00", 0.5),
        ("a", "x2", "2026-01-02T00:00", 0.5),
        ("a", "x4", "2026-01-04T00:00", np.nan),  # no limit: nothing to replay
        ("b", "y1", "2026-01-01T00:00", 1.0),
    )
    none = _advised()
    assert sorted(advice_todo(s, none)["capture"]) == ["x3", "y1"]
    said = _advised(("c/n/a/p/x3", None), ("c/n/b/p/y1", "set it"))
    assert list(advice_todo(s, said)["capture"]) == ["x2"]
    assert advice_todo(s, _advised(*said.itertuples(index=False), ("c/n/a/p/x2", "keep it"))).empty
    # a newer bundle of a: asked about; b's answer stands
    s2 = pd.concat([s, _rows(("a", "x5", "2026-01-05T00:00", 0.5))], ignore_index=True)
    assert list(advice_todo(s2, _advised(*said.itertuples(index=False), ("c/n/a/p/x2", "keep it")))["capture"]) == [
        "x5"
    ]
    # a workload the advisor never answers: asked about its newest ADVICE_TRIES, then left
    many = _rows(*[("c", f"z{i}", f"2026-02-{i + 1:02d}T00:00", 0.5) for i in range(ADVICE_TRIES + 2)])
    asked: list[tuple[str, None]] = []
    while not (t := advice_todo(many, _advised(*asked))).empty:
        asked.append((t["key"].iloc[0], None))
    assert [k.rsplit("/", 1)[1] for k, _ in asked] == [f"z{i}" for i in range(ADVICE_TRIES + 1, 1, -1)]
    # an errored bundle is never asked
    bad = _rows(("d", "e1", "2026-01-01T00:00", 0.5)).assign(error="cpu_stat.csv: empty")
    assert advice_todo(bad, none).empty


def test_damaged_summary_and_unwritable_report_are_named(tmp_path):
    from gmpanalysis.fleet.compute import SUMMARY_DIR, read_summary, summary_frame
    from gmpanalysis.fleet.report import to_fleet_report

    bad = tmp_path / "out" / SUMMARY_DIR / "cluster=c/namespace=n/workload=w/pod=p/capture=x" / "bundle.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"PAR1 half a file")
    with pytest.raises(gmp.BundleError, match="not a readable summary row.*run fleet again"):
        read_summary(str(tmp_path / "out"))
    (tmp_path / "a-file").write_text("")
    with pytest.raises(gmp.GmpError, match="cannot write the fleet report"):
        to_fleet_report(summary_frame([]), tmp_path / "a-file" / "report.html")


def _check_counts(row: dict, per: pd.DataFrame) -> None:
    """A summary row's counts are the counters' deltas over the table: the known rows and
    what the ambiguous groups of a hole hold (df_conservation's ledger, built from the raw
    reads)."""
    c = df_conservation(per)
    # the raw reads' increase per segment (last - first read) less what was credited before
    # the table's first boundary or after its last
    total = {k: float((g["delta"] - g["outside"]).sum()) for k, g in c.groupby("counter")}
    assert row["throttled_periods"] == total["nr_throttled"]
    assert row["active_periods"] == total["nr_periods"]
    assert row["frozen_cpu_s"] == pytest.approx(total["throttled_us"] / 1e6, abs=1e-6)


# the nested run throttles in some periods only: there a hole hides which periods ended
# throttled (an ambiguous group); in runs throttled every period the count resolves it
INTERMITTENT = "nested-0.5cpu-pod0.5-gmp2"
HOLED = {n: _load(RUNS / n) for n in (*SOME, INTERMITTENT)}


def _holed(name: str, holes: list[tuple[float, int]]) -> gmp.Run:
    run = copy.copy(HOLED[name])
    s = run.samples
    t0, t1 = int(s["t_ns"].iloc[0]), int(s["t_ns"].iloc[-1])
    for pos, ms in holes:
        s = D.hole(s, int(t0 + pos * (t1 - t0 - ms * 1_000_000)), ms * 1_000_000)
    run.samples = s
    return run


def test_summary_counts_what_a_hole_hides():
    run = _holed(INTERMITTENT, [(0.5, 350)])
    per = gmp.df_periods(run)
    row = summarize_bundle(run, per)
    _check_counts(row, per)
    # the periods in the hole are NA, yet their throttles are counted (the known rows alone fall short)
    assert row["unknown_periods"] > 0
    assert row["throttled_periods"] > int(per["throttled"].fillna(False).astype(bool).sum())
    # the wall-clock frozen share is taken over the periods that know it, not diluted by the hole
    assert row["stall_known_s"] < row["span_s"]


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([*SOME, INTERMITTENT, INTERMITTENT]),
    st.lists(st.tuples(st.floats(0.05, 0.95), st.sampled_from([10, 34, 150, 350, 700])), min_size=1, max_size=3),
)
def test_summary_counts_equal_the_counter_deltas_with_holes(name, holes):
    """Holes cut into real runs: the fleet's throttled periods and frozen CPU-seconds still
    equal the counters' deltas (never the known rows alone)."""
    run = _holed(name, holes)
    per = gmp.df_periods(run)
    _check_counts(summarize_bundle(run, per), per)


def _same_periods(key_path: str, got: pd.DataFrame) -> None:
    want = gmp.df_periods(_load(key_path))
    assert len(got) == len(want)
    for c in ("period", "start_ns", "end_ns", "usage_us", "stall_us", "throttled_rq_us"):
        np.testing.assert_allclose(got[c].to_numpy(dtype=float), want[c].to_numpy(dtype=float), equal_nan=True)
    assert got["throttled"].astype("boolean").equals(want["throttled"].astype("boolean").reset_index(drop=True))


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """The address of a local cluster of one worker process, shared by the fleet runs here
    that are about bundles rather than about starting a cluster (each fleet(workers=N) starts
    and stops its own: about 3 s on two cores; the first run below still does)."""
    import dask
    import distributed

    with dask.config.set({"distributed.worker.profile.enabled": False}):
        cluster = distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
        )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def test_fleet_on_a_local_cluster(tmp_path, scheduler):
    """Four bundles on a local cluster of two worker processes (started by fleet): one
    summary row each, the periods in Parquet equal to df_periods of the bundle, the report
    ranking the workloads; a second run computes nothing; a later bundle and a damaged one
    (on a running scheduler): a new row, and a row with its error."""
    store = tmp_path / "store"
    for n in (*SOME, "nested-0.5cpu-pod0.5-gmp2"):
        put_bundle(RUNS / n, store)
    seen: list[str] = []
    s = fleet(store, workers=2, progress=False, on_result=lambda r: seen.append(r["key"]))
    assert sorted(seen) == sorted(s["key"]) and len(s) == 4 and s["error"].isna().all()
    # what fleet returns (kept in memory) is what was written
    pd.testing.assert_frame_equal(s, read_summary(str(store / "derived")))
    ls = list_bundles(store).set_index("key")
    per = fleet_periods(store).compute()
    assert set(per["bundle"]) == set(s["key"])
    for key in s["key"]:
        _same_periods(ls.loc[key, "path"], per[per["bundle"] == key].sort_values("period").reset_index(drop=True))
    # frozen CPU-seconds are cpu.stat's throttled time over the periods (a sum over CPUs);
    # the wall time frozen counts every level's freezes (the nested run's pod's too)
    for r in s.itertuples():
        want = gmp.df_periods(_load(ls.loc[r.key, "path"]))
        _check_counts(r._asdict(), want)
        known = want["throttled"].notna()
        assert r.stall_s == pytest.approx(want.loc[known, "frozen_us"].sum() / 1e6)
        if r.workload.startswith("nested"):
            assert r.stall_s > want.loc[known, "stall_us"].sum() / 1e6 + 0.5
    wl = df_fleet_workloads(s)
    rank = list(zip(wl["frozen_wall_pct"], wl["frozen_cpu_s_per_h"], strict=True))
    assert rank == sorted(rank, reverse=True)  # frozen by any level first (a pod's quota too)
    assert wl["advice"].notna().all() and (wl["limit_cpus"] == 0.5).all()
    # the advisor ran once per workload (here one bundle each) and said what advise() says
    assert len(read_advice(str(store / "derived"))) == len(wl) == 4
    for r in s.itertuples():
        t = gmp.advise(_load(ls.loc[r.key, "path"]), objective="throttle", bursts=(0.0,))
        assert r.advice == t.attrs["recommendation"] and r.advice_gomaxprocs == t.iloc[0]["gomaxprocs"]
    report = (store / "derived" / "report.html").read_text()
    assert all(w in report for w in wl["workload"])
    again: list[str] = []
    s2 = fleet(store, workers=1, progress=False, on_result=lambda r: again.append(r["key"]))
    assert again == [] and s2["key"].tolist() == sorted(s["key"])
    # a later capture of one workload: its summary row is added and the advisor asked about
    # it alone; the workload's advice is now the new bundle's
    later = tmp_path / "later" / SOME[0]
    shutil.copytree(RUNS / SOME[0], later)
    meta = json.loads((later / "meta.json").read_text())
    meta.update(capture="later", wall_start="2099-01-01T00:00:00.000+00:00")
    (later / "meta.json").write_text(json.dumps(meta))
    put_bundle(later, store)
    s3 = fleet(store, scheduler=scheduler, progress=False)
    adv = read_advice(str(store / "derived"))
    assert len(s3) == 5 and len(adv) == 5 and adv["key"].str.endswith("/later").sum() == 1
    pd.testing.assert_frame_equal(s3, read_summary(str(store / "derived")))
    w0 = df_fleet_workloads(s3).set_index("workload").loc[SOME[0]]
    assert w0["bundles"] == 2 and w0["advice"] == s3.loc[s3["key"].str.endswith("/later"), "advice"].iloc[0]
    # plain directories, one of them damaged: its row says why, the others are analysed
    bad = tmp_path / "dirs" / "broken"
    shutil.copytree(RUNS / "cpu-0.5cpu-gmp1", bad)
    (bad / "cpu_stat.csv").write_bytes(b"")
    shutil.copytree(RUNS / "cpu-0.5cpu-gmp8", tmp_path / "dirs" / "ok \udcff")  # an undecodable byte
    out = fleet(tmp_path / "dirs", tmp_path / "out", scheduler=scheduler, progress=False)
    assert len(out) == 2 and out["error"].notna().sum() == 1
    assert "cpu_stat.csv" in out["error"].dropna().iloc[0]
    assert out["path"].str.endswith("ok \\xff").sum() == 1  # the undecodable byte as a backslash escape
    assert out.loc[out["error"].isna(), "advice"].notna().all()  # the advisor opened it by its real path


def test_a_bundle_the_advisor_cannot_load_is_named_after_the_report_is_written(tmp_path, scheduler):
    """A bundle damaged after its summary row was written (here: emptied as its row lands):
    the advisor's task fails after Dask's retries; the report is still written, the error
    names the bundle, and the next run asks again."""
    for n in SOME[:2]:
        shutil.copytree(RUNS / n, tmp_path / "dirs" / n)
    victim = tmp_path / "dirs" / SOME[0]

    def damage(row: dict) -> None:
        if row["pod"] == SOME[0]:
            (victim / "cpu_stat.csv").write_bytes(b"")

    with pytest.raises(gmp.GmpError, match=r"the advisor failed on 1 bundle.*written without their advice"):
        fleet(tmp_path / "dirs", tmp_path / "out", scheduler=scheduler, progress=False, on_result=damage)
    assert (tmp_path / "out" / "report.html").exists()
    adv = read_advice(str(tmp_path / "out"))
    assert len(adv) == 1 and SOME[1] in adv["key"].iloc[0]
    shutil.copy(RUNS / SOME[0] / "cpu_stat.csv", victim / "cpu_stat.csv")
    s = fleet(tmp_path / "dirs", tmp_path / "out", scheduler=scheduler, progress=False)
    assert s["advice"].notna().all() and len(read_advice(str(tmp_path / "out"))) == 2


def test_newest_first_reads_wall_start_as_a_time():
    rows = pd.DataFrame(
        {
            "wall_start": ["2026-01-01T10:00:00.000+02:00", "2026-01-01T09:30:00.000+00:00", "", None],
            "capture": ["a", "b", "c", "d"],
        }
    )
    # 09:30 UTC is after 10:00 at +02:00; rows without a time come last
    assert list(newest_first(rows)["capture"]) == ["b", "a", "d", "c"]


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def test_fleet_on_a_dask_scheduler_with_a_worker_killed_mid_run(tmp_path):
    """A scheduler and two workers as separate processes (dask scheduler / dask worker, no
    nanny: a killed worker stays dead). 24 bundles (three captures of each of eight
    workloads; a task takes ~0.1 s); at the first result a worker that holds tasks at that
    moment is killed with SIGKILL. Dask moves its tasks to the other worker, and the output
    holds every bundle once, each with its periods, and one advice per workload."""
    store = tmp_path / "store"
    for cluster in ("c1", "c2"):
        for n in (*SOME, "cpu-0.5cpu-gmp8"):
            for k in range(3):
                src = tmp_path / "relabel" / cluster / f"{n}-{k}"
                shutil.copytree(RUNS / n, src)
                meta = json.loads((src / "meta.json").read_text())
                # real captures, labelled as another cluster's and another capture's
                meta.update(cluster=cluster, capture=f"k{k}")
                (src / "meta.json").write_text(json.dumps(meta))
                put_bundle(src, store)
    assert len(list_bundles(store)) == 24
    dask = str(Path(sys.executable).with_name("dask"))
    sched_file = tmp_path / "scheduler.json"
    procs = [
        _start(
            [
                dask,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            tmp_path / "scheduler.log",
        )  # fmt: skip
    ]
    try:
        addr = _scheduler_address(sched_file)
        for i in range(2):
            cmd = [dask, "worker", "--scheduler-file", str(sched_file), "--nthreads", "1", "--no-nanny",
                   "--no-dashboard", "--name", f"w{i}", "--host", "127.0.0.1"]  # fmt: skip
            procs.append(_start(cmd, tmp_path / f"worker{i}.log"))
        from distributed import Client, default_client

        with Client(addr, timeout=30) as c:
            c.wait_for_workers(2, timeout=60)
        killed: list[tuple[str, int]] = []

        def kill_one(_row: dict) -> None:
            """At the first result: SIGKILL a worker that holds tasks at that moment, asked of
            fleet's own client (a second client in this process trips Dask's gather when a
            lost worker's results are recomputed: "Event bound to a different event loop")."""
            if killed:
                return
            client = default_client()
            info = client.scheduler_info()["workers"]
            held = {a: len(ts) for a, ts in client.processing().items()}
            addr_w = max(held, key=held.get)
            name = str(info[addr_w]["name"])
            killed.append((name, held[addr_w]))
            procs[1 + int(name[1:])].send_signal(signal.SIGKILL)

        s = fleet(store, scheduler=addr, progress=False, on_result=kill_one)
        (name, held) = killed[0]
        assert held >= 1 and procs[1 + int(name[1:])].wait(timeout=10) == -signal.SIGKILL
        assert len(s) == 24 and s["key"].is_unique and s["error"].isna().all(), s[["key", "error"]]
        assert s["advice"].notna().sum() == 8 and len(read_advice(str(store / "derived"))) == 8
        per = fleet_periods(store).compute()
        assert set(per["bundle"]) == set(s["key"])
        # one visible periods file per bundle (a killed task's temporary file is hidden)
        files = [f for f in (store / "derived" / "periods").rglob("*.parquet") if not f.name.startswith(".")]
        assert len(files) == 24
    finally:
        stop_procs(procs)  # the workers first, then the scheduler


def test_fleet_stops_waiting_when_no_worker_is_left(tmp_path, monkeypatch):
    """A scheduler and one worker without a nanny; at the first result the worker is killed
    with SIGKILL, so none is left. Dask alone would wait for a worker forever; the fleet
    waits NO_WORKER_S (here 3 s), cancels what is pending and fails naming why, within a
    minute, with the bundle that finished kept."""
    import threading

    from gmpanalysis.errors import GmpError
    from gmpanalysis.fleet import compute

    monkeypatch.setitem(compute.NO_WORKER_S, "scheduler", 3.0)
    monkeypatch.setattr(compute, "WATCH_EVERY_S", 0.5)
    store = tmp_path / "store"
    for n in SOME:
        for k in range(4):
            src = tmp_path / "relabel" / f"{n}-{k}"
            shutil.copytree(RUNS / n, src)
            meta = json.loads((src / "meta.json").read_text())
            meta.update(capture=f"k{k}")
            (src / "meta.json").write_text(json.dumps(meta))
            put_bundle(src, store)
    dask = str(Path(sys.executable).with_name("dask"))
    sched_file = tmp_path / "scheduler.json"
    cmd = [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
           "--scheduler-file", str(sched_file)]  # fmt: skip
    procs = [_start(cmd, tmp_path / "scheduler.log")]
    try:
        addr = _scheduler_address(sched_file)
        cmd = [dask, "worker", "--scheduler-file", str(sched_file), "--nthreads", "1", "--no-nanny",
               "--no-dashboard", "--name", "w0", "--host", "127.0.0.1"]  # fmt: skip
        procs.append(_start(cmd, tmp_path / "worker0.log"))
        from distributed import Client

        with Client(addr, timeout=30) as c:
            c.wait_for_workers(1, timeout=60)

        def kill(_row: dict) -> None:
            if procs[1].poll() is None:
                procs[1].send_signal(signal.SIGKILL)

        got: dict = {}

        def go() -> None:
            try:
                got["summary"] = fleet(store, scheduler=addr, progress=False, on_result=kill)
            except Exception as e:  # noqa: BLE001 - the test reads it
                got["error"] = e

        t = threading.Thread(target=go, daemon=True)
        t.start()
        t.join(timeout=90)
        assert not t.is_alive(), "the fleet still waits for a worker 90 s after the only one was killed"
        assert isinstance(got.get("error"), GmpError), got
        assert "no Dask worker was left for 3 s" in str(got["error"]) and "run fleet again" in str(got["error"])
        assert procs[1].wait(timeout=10) == -signal.SIGKILL
    finally:
        stop_procs(procs)


def _scheduler_address(f: Path) -> str:
    """The address in the scheduler's file, once it is there whole (it is not written atomically)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            return json.loads(f.read_text())["address"]
        except (FileNotFoundError, ValueError, KeyError):
            time.sleep(0.2)
    raise AssertionError(f"{f}: the scheduler wrote no address in 60 s")


def test_put_fills_what_the_trace_tells_into_an_agent_bundle(tmp_path):
    """The node agent cannot ask a third-party process its GOMAXPROCS or Go version: the
    store fills both from the bundle's trace, as collect does, and says so."""
    from gmpanalysis.goversion import go_version_from_header

    src = tmp_path / "agent-bundle"
    shutil.copytree(RUNS / "cpu-0.5cpu-gmp2", src)
    meta = json.loads((src / "meta.json").read_text())
    meta.update(gomaxprocs_effective=None, go_version=None)
    (src / "meta.json").write_text(json.dumps(meta))
    where = put_bundle(src, tmp_path / "store")
    stored = json.loads((Path(where) / "meta.json").read_text())
    tr = gmp.read_trace(src / "trace.out")
    assert stored["gomaxprocs_effective"] == int(tr.gomaxprocs["procs"].iloc[0]) == 2
    assert stored["go_version"] == go_version_from_header(tr.meta["version"])
    assert set(stored["facts_from_trace"]) == {"gomaxprocs_effective", "go_version"}
    assert json.loads((src / "meta.json").read_text())["go_version"] is None  # the source is left as it was
    # stored again: the same capture, one bundle
    assert put_bundle(src, tmp_path / "store") == where
    # ... also where an earlier version stored it without the facts (its raw meta.json)
    (Path(where) / "meta.json").write_bytes((src / "meta.json").read_bytes())
    assert put_bundle(src, tmp_path / "store") == where


def test_the_summary_kept_in_memory_has_the_read_back_dtypes_without_advice(tmp_path):
    from gmpanalysis.fleet.compute import advice_frame

    empty = read_advice(str(tmp_path / "nothing-here"))
    assert advice_frame([]).dtypes.to_dict() == empty.dtypes.to_dict()


def test_a_bundle_no_quota_limited_is_a_row_not_a_failure(tmp_path):
    """A container without a CPU limit is routine in a fleet: its summary row says it never
    throttled or froze (over its samples' span), it has no periods, and the workloads ranked
    first are the ones frozen by any level's quota."""
    import math

    from gmpanalysis.fleet.compute import analyse_bundle

    out = str(tmp_path / "derived")
    parts = {"cluster": "c", "namespace": "n", "workload": "free", "pod": "free-0", "capture": "1"}
    free = analyse_bundle("fixtures/whatif/unlimited-cpu-gmp2", "free", parts, out)
    assert free["error"] is None and free["throttled_periods"] == 0 and free["stall_s"] == 0.0
    assert free["span_s"] > 5 and math.isnan(free["limit_cpus"])
    assert not list((tmp_path / "derived").rglob("periods.parquet"))
    limited = analyse_bundle(str(RUNS / "cpu-0.5cpu-gmp8"), "hot", {**parts, "workload": "hot"}, out)
    wl = df_fleet_workloads(pd.DataFrame([free, limited]).assign(advice=None, advice_limit_cpus=np.nan,
                                                                  advice_gomaxprocs=np.nan))  # fmt: skip
    assert list(wl["workload"]) == ["hot", "free"] and list(wl["errors"]) == [0, 0]
    assert wl.set_index("workload").loc["free", "frozen_wall_pct"] == 0.0


def test_a_bundle_still_being_written_is_analysed_again_until_finished(tmp_path):
    """A bundle whose meta.json says "complete": false is analysed as it is, its row kept
    apart, and not counted as processed: the next fleet run analyses it again, and once it
    is finished its row replaces the partial one; the fleet report names it meanwhile."""
    from gmpanalysis.fleet.compute import PARTIAL_ROW, ROW, analyse_bundle, processed
    from gmpanalysis.fleet.report import to_fleet_report

    d = tmp_path / "b"
    shutil.copytree(RUNS / "cpu-0.5cpu-gmp8", d)
    meta = json.loads((d / "meta.json").read_text())
    (d / "meta.json").write_text(json.dumps({**meta, "complete": False}))
    out = str(tmp_path / "derived")
    parts = {"cluster": "c", "namespace": "n", "workload": "w", "pod": "w-0", "capture": "1"}
    row = analyse_bundle(str(d), "k", parts, out)
    assert row["complete"] is False and processed(out) == set()
    assert [p.name for p in (tmp_path / "derived").rglob("bundle*.parquet")] == [PARTIAL_ROW]
    summary = read_summary(out)
    assert list(summary["complete"]) == [False]
    assert "still being written" in open(to_fleet_report(summary, tmp_path / "r.html")).read()
    (d / "meta.json").write_text(json.dumps({**meta, "complete": True}))
    row = analyse_bundle(str(d), "k", parts, out)
    assert row["complete"] is True and processed(out) == {"c/n/w/w-0/1"}
    assert [p.name for p in (tmp_path / "derived").rglob("bundle*.parquet")] == [ROW]


def test_a_collection_that_ended_early_is_finished_and_a_partial_that_fails_is_asked_again(tmp_path):
    """complete: false with an error is a collection that ended early and says why: done,
    its row final. One still being written whose samples do not load yet is asked again."""
    from gmpanalysis.fleet.compute import analyse_bundle, processed

    parts = {"cluster": "c", "namespace": "n", "workload": "w", "pod": "w-0", "capture": "1"}
    ended = tmp_path / "ended"
    shutil.copytree(RUNS / "cpu-0.5cpu-gmp8", ended)
    meta = json.loads((ended / "meta.json").read_text())
    (ended / "meta.json").write_text(json.dumps({**meta, "complete": False, "error": "the container went away"}))
    out = str(tmp_path / "d1")
    assert analyse_bundle(str(ended), "k", parts, out)["complete"] is True and processed(out) == {"c/n/w/w-0/1"}
    busy = tmp_path / "busy"
    shutil.copytree(RUNS / "cpu-0.5cpu-gmp8", busy)
    (busy / "meta.json").write_text(json.dumps({**meta, "complete": False}))
    (busy / "cpu_stat.csv").write_text("t_ns,read_ns,usa")
    out = str(tmp_path / "d2")
    row = analyse_bundle(str(busy), "k", parts, out)
    assert row["complete"] is False and row["error"] and processed(out) == set()
