"""advise: settings ranked by the what-if replay, on every shipped bundle."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import gmpanalysis as gmp
from gmpanalysis.advise import advise
from gmpanalysis.errors import UsageError
from gmpanalysis.gomaxprocs import rules

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "16cpu-v2"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BUNDLES = sorted(p for p in Path("fixtures/runs").iterdir() if (p / "meta.json").exists())


def _load(p: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gmp.load_run(p)


@pytest.mark.parametrize("path", BUNDLES, ids=[p.name for p in BUNDLES])
def test_advise_ranks_by_each_objective_on_every_shipped_bundle(path):
    run = _load(path)
    small = {"limits": (0.25, 0.5, 1.0, 2.0), "gomaxprocs": (1, 2)}
    t = advise(run, objective="throttle", **small)
    assert len(t) == 4 * 2 * 2 and list(t["rank"]) == list(range(1, len(t) + 1))
    key = list(zip(t.frozen_pct, t.frozen_ms_per_s, t.throttled_pct, t.stall_ms_per_s, t.cost_cpu, strict=True))
    assert key == sorted(key)  # fewest frozen periods (by any level) first
    assert t.attrs["recommendation"].startswith("For throttle: a CPU limit of")
    assert run.requests is not None and not t["p99_ms"].isna().any()  # every shipped run has requests
    p = advise(run, objective="p99", **small)
    best = p["p99_ms"].min()
    near = p[p["p99_ms"] <= 1.05 * best]
    assert p.iloc[0]["p99_ms"] <= 1.05 * best and p.iloc[0]["cost_cpu"] == near["cost_cpu"].min()
    c = advise(run, objective="cost", **small)
    ok = (c["throttled_pct"] <= 10) & (c["p99_ms"] <= 1.25 * c["p99_ms"].min())
    assert ok.any()  # 2 CPUs of quota on 2 CPUs throttles nothing
    assert c.iloc[0]["cost_cpu"] == c.loc[ok, "cost_cpu"].min()


def test_baselines_are_the_rules_at_the_recommended_limit():
    run = _load(Path("fixtures/runs/cpu-0.5cpu-gmp8"))
    t = advise(run, objective="p99", limits=(0.5, 1.5), gomaxprocs=(1, 2))
    best = t.iloc[0]
    r = rules(int(best.quota_us), int(best.period_us), run.meta["ncpu"])
    b = t.attrs["baselines"].set_index("setting")
    for name in ("go1.25 default", "automaxprocs", "downward API"):
        row = b.loc[f"{name} (GOMAXPROCS={r[name]})"]
        assert row["gomaxprocs"] == r[name] and row["limit_cpu"] == best.limit_cpu
        assert math.isclose(row["p99_worse_pct"], 100 * (row["p99_ms"] / best.p99_ms - 1))
    assert "the run as it was" in b.index and b.loc["the run as it was", "gomaxprocs"] == 8


def test_each_run_as_it_was_on_its_own_cpus():
    """The run as it was is replayed on the CPUs it had, whatever CPUs the advice is for;
    advised together, each run is shown as it was, under its own name and limit."""
    run = _load(Path("fixtures/runs/cpu-0.5cpu-gmp8"))
    was = [
        advise(run, limits=(0.5,), gomaxprocs=(2,), cpus=c)
        .attrs["baselines"]
        .set_index("setting")
        .loc["the run as it was"]
        for c in (1, 2, 16)
    ]
    assert all(w["throttled_pct"] == was[0]["throttled_pct"] and w["p99_ms"] == was[0]["p99_ms"] for w in was)
    other = _load(Path("fixtures/runs/cpu-0.5cpu-gmp1"))
    b = advise([run, other], limits=(0.5,), gomaxprocs=(2,)).attrs["baselines"].set_index("setting")
    assert (
        b.loc["cpu-0.5cpu-gmp8 as it was", "gomaxprocs"] == 8 and b.loc["cpu-0.5cpu-gmp1 as it was", "gomaxprocs"] == 1
    )
    alone = advise(other, limits=(0.5,), gomaxprocs=(2,)).attrs["baselines"].set_index("setting")
    assert b.loc["cpu-0.5cpu-gmp1 as it was", "throttled_pct"] == alone.loc["the run as it was", "throttled_pct"]


def test_bad_settings_are_named():
    run = _load(Path("fixtures/runs/cpu-0.5cpu-gmp2"))
    with pytest.raises(UsageError, match="objective"):
        advise(run, objective="fast")
    with pytest.raises(UsageError, match="at least one run"):
        advise([])
    for kw, says in (
        ({"limits": 1}, "give a list"),
        ({"gomaxprocs": 2}, "give a list"),
        ({"bursts": 0.5}, "give a list"),
        ({"limits": [1e9]}, "largest quota"),
        ({"limits": [math.inf]}, "largest quota"),
        ({"cpus": math.nan}, "whole number"),
        ({"cpus": 2.5}, "whole number"),
        ({"cpus": True}, "whole number"),
    ):
        with pytest.raises(UsageError, match=says):
            advise(run, **kw)


def test_the_command_prints_the_ranking_and_the_sentence():
    out = subprocess.run(
        [sys.executable, "-m", "gmpanalysis.cli", "advise", "fixtures/runs/cpu-0.5cpu-gmp1", "--objective", "cost",
         "--max-limit", "1", "--top", "3"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "For cost: a CPU limit of" in out and "go1.25 default" in out
    assert "the model's held-out error on real runs in this regime" in out or "has not been validated" in out


def test_the_command_tells_what_reading_the_trace_found(tmp_path):
    """A trace cut short is read lazily, by the advice itself: the command still prints
    the note it left (the advice then rests on the generations before the cut)."""
    import shutil

    run = tmp_path / "cut"
    shutil.copytree("fixtures/runs/cpu-0.5cpu-gmp2", run)
    trace = run / "trace.out"
    trace.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    done = subprocess.run(
        [sys.executable, "-m", "gmpanalysis.cli", "advise", str(run), "--top", "1"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert f"{run}: note: {trace}: trace ends inside a generation" in done.stderr


def test_error_bars_come_from_the_validation_in_the_settings_regime(monkeypatch):
    """The advice's ± are the held-out errors of the recommended setting's regime, read from
    the validation file; outside every validated regime it gives none and says so."""
    from gmpanalysis import modelerror as ME

    A = sys.modules["gmpanalysis.advise"]  # the package's name "advise" is the function

    run = gmp.load_run("fixtures/runs/cpu-0.5cpu-gmp2")
    adv = gmp.advise(run, limits=[0.5], gomaxprocs=[2], bursts=[0.0])
    reg = ME.regime(2, 0.5, 2)
    assert adv.attrs["regime"] == reg
    fake = {"date": "2000-01-01", "regimes": {reg: {"p99_pct": {"n": 9, "targets": 3, "median": 7.5, "p90": 21.0}}}}
    monkeypatch.setattr(A, "load_validation", lambda: fake)
    adv = gmp.advise(run, limits=[0.5], gomaxprocs=[2], bursts=[0.0])
    assert adv.attrs["model_error"] == {"p99_pct": (7.5, 21.0, "% of p99")}
    # a share of the measured value: p99 = pred / (1 ± e)
    p = float(adv.iloc[0]["p99_ms"])
    want = f"(the measured p99 within {p / 1.075:,.0f}-{p / 0.925:,.0f} ms at the median held-out error, "
    want += f"{p / 1.21:,.0f}-{p / 0.79:,.0f}"
    assert want in adv.attrs["recommendation"] and adv.attrs["validated"] == "2000-01-01"
    few = {"regimes": {reg: {"p99_pct": {"n": ME.MIN_PREDICTIONS - 1, "targets": 3, "median": 1.0, "p90": 2.0}}}}
    monkeypatch.setattr(A, "load_validation", lambda: few)
    adv = gmp.advise(run, limits=[0.5], gomaxprocs=[2], bursts=[0.0])
    assert adv.attrs["model_error"] == {} and "not been validated in this regime" in adv.attrs["recommendation"]
    one = {"regimes": {reg: {"p99_pct": {"n": 9, "targets": ME.MIN_TARGETS - 1, "median": 1.0, "p90": 2.0}}}}
    monkeypatch.setattr(A, "load_validation", lambda: one)  # many predictions of one run: not enough
    assert gmp.advise(run, limits=[0.5], gomaxprocs=[2], bursts=[0.0]).attrs["model_error"] == {}


def test_latency_error_bars_only_for_a_load_loop_the_regime_was_validated_on(monkeypatch):
    """A regime validated on open-loop runs only gives no p99 or throughput error bars to a
    closed-loop run (its latency spread is carried over, an open loop's queue replayed: one
    says nothing of the other), says so, and keeps the bars of the figures that do not hang
    on the loop; a run of a validated loop, or a validation that does not say, keeps them all."""
    import copy

    from gmpanalysis import modelerror as ME

    A = sys.modules["gmpanalysis.advise"]
    run = gmp.load_run("fixtures/runs/cpu-0.5cpu-gmp2")  # an open loop (meta.json load.mode)
    assert ME.loop_of(run.meta) == "open"
    reg = ME.regime(2, 0.5, 2)
    fig = {"n": 9, "targets": 3, "median": 7.5, "p90": 21.0}
    v = {"date": "2000-01-01", "regimes": {reg: {"loops": ["open"], "p99_pct": fig, "throttled_pct": fig}}}
    monkeypatch.setattr(A, "load_validation", lambda: v)
    adv = gmp.advise(run, limits=[0.5], gomaxprocs=[2], bursts=[0.0])
    assert set(adv.attrs["model_error"]) == {"p99_pct", "throttled_pct"}
    assert "have no error bars" not in adv.attrs["recommendation"]
    closed = copy.copy(run)
    closed.meta = {**run.meta, "load": {**run.meta["load"], "mode": "closed", "concurrency": 4}}
    adv = gmp.advise(closed, limits=[0.5], gomaxprocs=[2], bursts=[0.0])
    assert set(adv.attrs["model_error"]) == {"throttled_pct"}
    said = adv.attrs["recommendation"]
    assert "validated on open-loop load only, and the load advised here is closed-loop" in said
    assert "(measured " not in said  # no p99 range from the open-loop errors
    unsaid = {"regimes": {reg: {"p99_pct": fig}}}  # a validation from before the loops were kept
    monkeypatch.setattr(A, "load_validation", lambda: unsaid)
    assert set(gmp.advise(closed, limits=[0.5], gomaxprocs=[2], bursts=[0.0]).attrs["model_error"]) == {"p99_pct"}


def test_a_run_that_does_not_say_its_loop_gets_no_latency_bars_and_a_note(monkeypatch, tmp_path):
    """Where the regime's errors were measured on open loops, a run whose meta.json does not
    say how its load was sent gets no p99 bars (its clients may have waited for answers) and
    the advice and the run's notes say so; a mode spelt "Closed" is a closed loop; a closed
    loop without a whole number of clients is refused, naming meta.json."""
    import copy

    from gmpanalysis import modelerror as ME

    A = sys.modules["gmpanalysis.advise"]
    src = gmp.load_run("fixtures/runs/cpu-0.5cpu-gmp2")
    reg = ME.regime(2, 0.5, 2)
    fig = {"n": 9, "targets": 3, "median": 7.5, "p90": 21.0}
    v = {"date": "2000-01-01", "regimes": {reg: {"loops": ["open"], "p99_pct": fig, "throttled_pct": fig}}}
    monkeypatch.setattr(A, "load_validation", lambda: v)
    unsaid = copy.copy(src)
    unsaid.notes = []
    unsaid.meta = {k: x for k, x in src.meta.items() if k != "load"}
    adv = gmp.advise(unsaid, limits=[0.5], gomaxprocs=[2], bursts=[0.0])
    assert set(adv.attrs["model_error"]) == {"throttled_pct"}
    assert "does not say how it was sent (meta.json load.mode)" in adv.attrs["recommendation"]
    assert any("load.mode is not given" in n and "open loop" in n for n in unsaid.notes)
    assert ME.loop_of({"load": {"mode": "Closed "}}) == "closed"
    for bad in (0, 2.5, "abc", None, True):
        run = copy.copy(src)
        run.meta = {**src.meta, "load": {**src.meta["load"], "mode": "closed", "concurrency": bad}}
        with pytest.raises(gmp.BundleError, match=r"meta\.json: load\.concurrency is .*whole number"):
            gmp.what_if(run)


def test_no_error_bars_on_cpus_the_regimes_runs_did_not_have(monkeypatch):
    """A regime measured on 16-CPU runs gives its bars on 16 CPUs, not on 64 (more threads
    waking on more CPUs), and the advice says which CPUs were validated; a validation that
    does not record the CPUs keeps them."""
    from gmpanalysis import modelerror as ME

    A = sys.modules["gmpanalysis.advise"]
    run = gmp.load_run("fixtures/runs/cpu-0.5cpu-gmp2")
    fig = {"n": 9, "targets": 3, "median": 7.5, "p90": 21.0}
    for cpus, want in ((16, True), (64, False), (8, False)):
        reg = ME.regime(cpus, 0.5, 2)
        v = {"regimes": {reg: {"cpus": [16], "loops": ["open"], "throttled_pct": fig}}}
        monkeypatch.setattr(A, "load_validation", lambda v=v: v)
        adv = gmp.advise(run, limits=[0.5], gomaxprocs=[2], bursts=[0.0], cpus=cpus)
        assert bool(adv.attrs["model_error"]) is want, cpus
        said = adv.attrs["recommendation"]
        assert (f"has not been validated on {cpus} CPUs (in this regime, {reg}, its runs had 16)" in said) is not want
        v["regimes"][reg].pop("cpus")
        assert gmp.advise(run, limits=[0.5], gomaxprocs=[2], bursts=[0.0], cpus=cpus).attrs["model_error"]


def test_a_pod_quota_that_binds_at_every_limit_is_named():
    """A real v2 run whose pod holds 0.5 CPU above a 4-CPU container: at every container limit
    tried the pod's quota freezes the work, so the advice says that limit binds (and not
    for a pod that stops binding as the container's limit rises)."""
    bound = gmp.advise(_load(Path("fixtures/runs-v2/v2-6.12-ancestor-pod0.5-ctr4-default")))
    assert "a quota above this one freezes the work" in bound.attrs["recommendation"]
    assert "the pod's, 0.5 CPU in the run" in bound.attrs["recommendation"]
    free = gmp.advise(_load(Path("fixtures/runs/nested-0.5cpu-pod0.5-gmp2")))
    assert "a quota above this one" not in free.attrs["recommendation"]


def test_runs_of_both_loops_or_without_requests_advised_together_are_said(tmp_path):
    """Advised together, an open and a closed loop's p99 are averaged: the advice says so;
    a run without requests beside one with them: the p99 ranking says not every run has
    them."""
    import shutil

    open_run = _load(Path("fixtures/runs/cpu-0.5cpu-gmp2"))
    closed = _load(Path("fixtures/closed-loop/closed-1.5cpu-gmp2"))
    both = advise([open_run, closed], limits=(1.0,), gomaxprocs=(2,), bursts=(0.0,))
    assert "mix open- and closed-loop load" in both.attrs["recommendation"]
    assert "mix open" not in advise(open_run, limits=(1.0,), gomaxprocs=(2,)).attrs["recommendation"]
    bare = tmp_path / "bare"
    shutil.copytree("fixtures/runs/cpu-0.5cpu-gmp2", bare)
    (bare / "requests.csv").unlink()
    said = advise([open_run, _load(bare)], limits=(1.0,), gomaxprocs=(2,)).attrs["recommendation"]
    assert said.startswith("For throttle (not every run has requests, so no latency to rank by)")


def test_a_closed_loops_p99_takes_the_spread_of_the_runs_nearest_in_ps():
    """Three real closed-loop runs (fixtures/closed-loop: 1.5 CPUs on 2, GOMAXPROCS 1, 2, 4):
    advised together, every setting is predicted from all three, each with the latency
    spread of the runs at the setting's Ps (4 Ps run on 2 CPUs as 2), so the ranking puts
    first the GOMAXPROCS that measured the best p99; advised from one run, the settings the
    advice shows at Ps no run was at say whose spread their p99 carries."""
    runs = [gmp.load_run(f"fixtures/closed-loop/closed-1.5cpu-gmp{g}") for g in (1, 2, 4)]
    meas = {int(r.meta["gomaxprocs_effective"]): gmp.whatif.measured(r)["p99_ms"] for r in runs}
    kw = {"objective": "p99", "limits": [1.5], "gomaxprocs": [1, 2, 4], "bursts": [0.0]}
    adv = gmp.advise(runs, **kw)
    assert int(adv.iloc[0]["gomaxprocs"]) == min(meas, key=meas.get)
    alone = {int(r.meta["gomaxprocs_effective"]): gmp.advise(r, **kw).set_index("gomaxprocs") for r in runs}
    got = adv.set_index("gomaxprocs")
    for g in (1, 2, 4):  # the spread moves the tail, not the throughput: all runs in every setting
        each = [alone[x].loc[g, "throughput_rps"] for x in alone]
        assert got.loc[g, "throughput_rps"] == pytest.approx(sum(each) / len(each))
    assert got.loc[2, "p99_ms"] == pytest.approx(got.loc[4, "p99_ms"])
    assert got.loc[1, "p99_ms"] < min(alone[2].loc[1, "p99_ms"], alone[4].loc[1, "p99_ms"])
    assert "latency spread of a closed loop measured at other Ps" not in adv.attrs["recommendation"]
    one = gmp.advise(runs[0], **{**kw, "gomaxprocs": [2]})
    assert "(the nearest): at 2 Ps from 1 P." in one.attrs["recommendation"]
    # recommended at its own Ps, but automaxprocs' GOMAXPROCS (1 at 1.5 CPUs) is shown beside it
    two = gmp.advise(runs[1], **{**kw, "gomaxprocs": [2]})
    assert "(the nearest): at 1 P from 2 Ps." in two.attrs["recommendation"]
    # a run that does not tell its GOMAXPROCS keeps its own spread, and is said to
    blind = copy.copy(runs[2])
    blind.meta = {k: v for k, v in runs[2].meta.items() if not k.startswith("gomaxprocs")}
    both = gmp.advise([blind, runs[0]], **{**kw, "gomaxprocs": [2]})
    alone = gmp.advise(blind, **{**kw, "gomaxprocs": [2]})
    assert "does not tell the GOMAXPROCS it ran with" in both.attrs["recommendation"]
    own = gmp.advise(runs[0], **{**kw, "gomaxprocs": [2]})
    assert both.iloc[0]["p99_ms"] == pytest.approx((alone.iloc[0]["p99_ms"] + own.iloc[0]["p99_ms"]) / 2)


@pytest.mark.skipif(
    not (SHARED / "heavy-250m-gmp1").is_dir(), reason="../shared/data/16cpu-v2 is not beside this checkout"
)
def test_closed_loops_of_two_workloads_are_ranked_from_both():
    """Two real 16-CPU closed loops of different handlers (light at 16 Ps, heavy at 1 P):
    each alone ranks the GOMAXPROCS candidates the same way; together every candidate is
    predicted from both runs (the spread from the nearest), not one from each, so the
    ranking is theirs."""
    runs = [gmp.load_run(SHARED / n) for n in ("heavy-250m-gmp1", "light-250m-numcpu")]
    kw = {"objective": "p99", "limits": [0.25], "gomaxprocs": [1, 2, 16], "bursts": [0.0]}
    orders = [gmp.advise(r, **kw)["gomaxprocs"].tolist() for r in runs]
    assert orders[0] == orders[1]
    assert gmp.advise(runs, **kw)["gomaxprocs"].tolist() == orders[0]


def test_the_committed_validation_is_well_formed():
    from gmpanalysis import modelerror as ME

    v = ME.load()
    assert v["date"] and v["predictions"] > 0 and v["runs"]
    known = {ME.regime(c, lim, g) for c in (2, 4, 16) for lim in (None, 1.0) for g in (1, 2, 8)}
    assert set(v["regimes"]) <= known
    for figs in v["regimes"].values():
        assert set(figs) <= {*ME.UNITS, "loops", "cpus"} and set(figs.get("loops", [])) <= {"open", "closed"}
        assert all(isinstance(c, int) and c >= 1 for c in figs.get("cpus", []))
        for e in (e for k, e in figs.items() if k in ME.UNITS):
            assert e["n"] >= 1 and 0 <= e["median"] <= e["p90"]


def test_measured_range_inverts_an_error_relative_to_the_measured_value():
    from gmpanalysis.modelerror import measured_range

    lo, hi = measured_range(100.0, 25.0)
    # both ends are 25 % away from the value they are measured against
    assert abs(100 - lo) == pytest.approx(0.25 * lo) and abs(100 - hi) == pytest.approx(0.25 * hi)
    assert measured_range(100.0, 100.0)[1] == float("inf")


@pytest.mark.parametrize(
    ("kw", "names"),
    [
        ({"limits": []}, "limits=[]"),
        ({"gomaxprocs": []}, "gomaxprocs=[]"),
        ({"bursts": []}, "bursts=[]"),
        ({"limits": [0.001]}, "least quota the kernel accepts"),
        ({"limits": [0]}, "limits=[0]"),
        ({"bursts": [1.5]}, "above the quota"),
        ({"gomaxprocs": [0]}, "gomaxprocs=[0]"),
        ({"cpus": 0}, "cpus=0"),
    ],
)
def test_candidates_the_kernel_or_go_would_refuse_are_named(kw, names):
    """What cpu.max refuses (a quota under 1 ms, a burst above the quota), GOMAXPROCS 0,
    and an empty candidate list: a UsageError naming advise's own argument, not a KeyError
    or what_if's names."""
    run = _load(BUNDLES[0])
    with pytest.raises(UsageError) as e:
        advise(run, **kw)
    assert names in str(e.value) and "advise" in str(e.value)


def test_a_run_without_its_cpu_count_is_not_advised_for_one_cpu():
    import copy

    run = _load(Path("fixtures/runs/cpu-0.5cpu-gmp8"))
    blind = copy.copy(run)
    blind.meta = {k: v for k, v in run.meta.items() if k != "ncpu"}
    with pytest.raises(gmp.MissingDataError, match=r"no ncpu: give advise\(\.\.\., cpus=N\)"):
        advise(blind)
    assert advise(blind, cpus=run.meta["ncpu"]).attrs["regime"] == advise(run).attrs["regime"]


def test_the_report_shows_limits_as_they_would_be_set():
    """0.25 and 1.75 CPU stay 0.25 and 1.75 in the report's advice (they were rounded to one
    decimal with the measured figures: 0.2, 1.8)."""
    import re

    from gmpanalysis.report import _advice_html

    html = _advice_html(_load(Path("fixtures/runs/cpu-0.5cpu-gmp8")))
    first = re.findall(r"<tr>\s*<td>([0-9.]+)</td>", html)
    assert first and any(x in {"0.25", "0.75", "1.25", "1.75"} for x in first), first


def test_the_sentence_says_what_it_ranked_by_and_when_no_candidate_met_the_goals():
    import copy

    run = _load(Path("fixtures/runs/cpu-0.5cpu-gmp8"))
    # cost: every candidate under the run's demand throttles most periods
    said = advise(run, objective="cost", limits=[0.25, 0.3]).attrs["recommendation"]
    assert said.startswith("For cost:") and "No candidate met the cost objective's goals" in said
    assert "No candidate met" not in advise(run, objective="cost").attrs["recommendation"]
    # p99 without requests ranks by throttling, and says so
    blind = copy.copy(run)
    blind.requests = None
    said = advise(blind).attrs["recommendation"]
    assert said.startswith("For throttle (the run has no requests"), said


def test_runs_that_differ_in_cpus_or_period_are_not_advised_as_one():
    """Several runs get one answer in one setting: runs from machines with other CPU counts
    need cpus= (the answer took the first run's), other periods are advised apart."""
    import copy

    a = _load(Path("fixtures/runs/cpu-0.5cpu-gmp8"))
    b = copy.copy(_load(Path("fixtures/runs/cpu-0.5cpu-gmp1")))
    b.meta = {**b.meta, "ncpu": 16}
    with pytest.raises(UsageError, match=r"differ in cpus.*give cpus=N"):
        advise([a, b], limits=[0.5], gomaxprocs=[1])
    assert len(advise([a, b], cpus=2, limits=[0.5], gomaxprocs=[1]))
    assert len(advise([a, _load(Path("fixtures/runs/cpu-0.5cpu-gmp1"))], limits=[0.5], gomaxprocs=[1]))


def test_numpy_candidates_are_numbers():
    import numpy as np

    run = _load(Path("fixtures/runs/cpu-0.5cpu-gmp8"))
    t = advise(run, limits=np.array([1, 2]), gomaxprocs=np.array([1, 2]), bursts=[np.float32(0.5)])
    assert len(t) == 4


def test_the_run_as_it_was_is_replayed_with_its_resize():
    """A limit resized in place (0.5 → 2 CPU) is replayed as it was, quota period by period:
    the baseline row comes within the validation's goals of what the run measured (it was
    replayed at 0.5 CPU throughout: 98 % throttled, p99 1.5 s, against 47 % and 0.5 s)."""
    from gmpanalysis import whatif as W

    run = _load(Path("fixtures/runs/resize-0.5to2cpu-default"))
    b = advise(run).attrs["baselines"].set_index("setting")
    row = b.loc["the run as it was, 0.5 → 2 CPU"]
    m = W.measured(run)
    assert abs(row["throttled_pct"] - m["throttled_pct"]) <= 5
    assert row["p99_ms"] == pytest.approx(m["p99_ms"], rel=0.30)


def test_without_requests_the_advice_says_its_throttling_is_a_lower_bound():
    """A run without requests is replayed as the CPU it used, which its quota held down:
    the advice says so where the run throttled."""
    import copy

    run = copy.copy(_load(Path("fixtures/runs/cpu-0.5cpu-gmp8")))
    run.requests = None
    said = advise(run).attrs["recommendation"]
    from gmpanalysis import whatif as W

    thr = W.measured(run)["throttled_pct"]
    assert (
        "the throttling predicted is a lower bound" in said
        and f"({thr:.0f} % of its periods from its first CPU use to its last throttled)" in said
    )


def test_a_short_period_is_advised_within_the_kernels_quotas_and_without_borrowed_bars():
    """A real run at a 2 ms period (fixtures/short-period): the kernel's least quota, 1 ms,
    is 0.5 CPU there, so the default candidates start at 0.5 (0.25 CPU was refused as
    advise's own argument); the regime names the period, and no error bars measured at
    100 ms periods are lent to it. The offsets view and the report work there too (10 ms
    buckets would not fit the period: a tenth of it is the default)."""
    run = _load(Path("fixtures/short-period/period-2ms-0.5cpu-gmp2"))
    t = advise(run, gomaxprocs=[1, 2])
    assert t["limit_cpu"].min() == 0.5 and (t["quota_us"] >= 1000).all()
    assert t.attrs["regime"].endswith(", 2 ms periods") and t.attrs["model_error"] == {}
    assert "not been validated in this regime" in t.attrs["recommendation"]
    with pytest.raises(UsageError, match="below the least quota"):
        advise(run, limits=[0.25])
    off = gmp.df_period_offsets(run)
    assert sorted(off["offset_ms"].unique()) == pytest.approx([0.2 * i for i in range(10)])
    per = gmp.df_periods(run)
    assert off.groupby("period")["cpus"].mean().mul(2000).to_numpy() == pytest.approx(
        per.set_index("period").loc[off["period"].unique(), "usage_us"].to_numpy(), rel=1e-6, abs=1e-6
    )


def test_the_p99_ranking_prefers_the_cheapest_near_the_best_then_orders_by_p99():
    """The rule of the p99 objective, on rows of known numbers: within 5 % of the best p99
    the cheapest comes first, at one cost the one without a burst (a burst that buys less
    than 5 % is not worth setting); every setting outside that band comes after, by p99,
    not by cost."""
    import pandas as pd

    from gmpanalysis.advise import _rank

    t = pd.DataFrame(
        {
            "limit_cpu": [2.0, 1.0, 1.0, 0.25, 0.25, 0.5],
            "cost_cpu": [2.0, 1.0, 1.0, 0.25, 0.25, 0.5],
            "burst_us": [0.0, 100_000.0, 0.0, 0.0, 25_000.0, 0.0],
            "gomaxprocs": [2, 2, 2, 2, 2, 2],
            "p99_ms": [100.0, 102.0, 104.0, 90_000.0, 80_000.0, 500.0],
            "throttled_pct": [0.0] * 6,
        }
    )
    r = _rank(t, "p99", True)
    assert list(zip(r.limit_cpu, r.burst_us, strict=True)) == [
        (1.0, 0.0),  # within 5 % of 100 ms and cheapest; without the burst at that cost
        (1.0, 100_000.0),
        (2.0, 0.0),
        (0.5, 0.0),  # then by p99: 500 ms, 80 s, 90 s, whatever they cost
        (0.25, 25_000.0),
        (0.25, 0.0),
    ]


def test_advise_tries_the_least_limit_and_refuses_a_max_limit_below_it():
    """At a 2 ms period the least quota is 0.5 CPU: a max_limit below that is refused, naming
    both; the least candidate is tried even where it is none of the coarse steps."""
    from gmpanalysis.advise import _candidates

    run = _load(Path("fixtures/short-period/period-2ms-0.5cpu-gmp2"))
    with pytest.raises(UsageError, match=r"max_limit=0.25.*least quota .* \(0.5 CPU\)"):
        advise(run, max_limit=0.25)
    assert _candidates(4.0, 1.0, 1000 / 1500)[0] == 0.75  # a 1.5 ms period: 0.667 CPU at least


def test_max_limit_is_a_finite_number_and_bounds_the_limits_given():
    """max_limit NaN or infinite is named as such (not as limits=[nan]); limits given above it
    are refused rather than advised past it."""
    import math

    run = _load(BUNDLES[0])
    for bad in (math.nan, math.inf, 0.0):
        with pytest.raises(UsageError, match=f"max_limit={bad}: give positive"):
            advise(run, max_limit=bad, gomaxprocs=[2], bursts=[0.0])
    with pytest.raises(UsageError, match=r"\[2.0\] above max_limit"):
        advise(run, max_limit=0.6, limits=[0.5, 2.0], gomaxprocs=[2], bursts=[0.0])


@pytest.mark.parametrize(
    "name", ["closed-loop/closed-1.5cpu-gmp2", "runs/nested-0.5cpu-pod0.5-gmp2", "runs-v2/v2-6.12-cpu-0.5cpu-gmp8"]
)
def test_the_advisors_reuse_of_replays_no_quota_held_back_changes_no_figure(monkeypatch, name):
    """advise's search replays its limits in ascending order and lets a replay no quota held
    back answer for the larger limits and bursts of the same other settings: every figure as
    a replay of its own gives it (a closed loop, a pod's quota that moves with the
    container's, a v2 run), with fewer replays; a setting the kernel refuses is still refused."""
    from gmpanalysis import whatif as W
    from gmpanalysis.cgroup import MAX_QUOTA_US
    from gmpanalysis.replayinputs import memo, prep_built

    run = _load(Path("fixtures") / name)
    prep = memo(run, "prep", prep_built)
    calls = [0]
    inner = W._what_if

    def counted(*a, **k):
        calls[0] += 1
        return inner(*a, **k)

    monkeypatch.setattr(W, "_what_if", counted)
    reuse: dict = {}
    fresh_calls = reused_calls = 0
    for g in (1, 4):
        for lim in (0.5, 1.0, 2.0, 3.0, 6.0):
            for b in (0.0, 0.5):
                s = {"quota_us": lim * 100_000, "period_us": 100_000, "burst_us": b * lim * 100_000, "gomaxprocs": g}
                calls[0] = 0
                want = W.estimate_from_prep(prep, run.path, cpus=4, **s)
                fresh_calls += calls[0]
                calls[0] = 0
                got = W.estimate_from_prep(prep, run.path, cpus=4, reuse=reuse, **s)
                reused_calls += calls[0]
                assert got.keys() == want.keys()
                for k in want:
                    assert got[k] == want[k] or (math.isnan(got[k]) and math.isnan(want[k])), (g, lim, b, k)
    assert reused_calls < fresh_calls
    other = memo(_load(Path("fixtures/runs/cpu-0.5cpu-gmp8")), "prep", prep_built)
    with pytest.raises(UsageError, match="one run's replay inputs"):  # not another run's figures
        W.estimate_from_prep(other, run.path, cpus=4, reuse=reuse, **s)
    with pytest.raises(UsageError, match="quota_us"):
        W.estimate_from_prep(prep, run.path, cpus=4, reuse=reuse, quota_us=MAX_QUOTA_US * 2, period_us=100_000,
                             burst_us=0.0, gomaxprocs=1)  # fmt: skip


def test_a_burst_first_names_the_best_without_one():
    """A Kubernetes pod spec sets no cpu.max.burst: where the best setting needs one, the
    advice names the best without, as ranked in the same table; --bursts 0 weighs none."""
    run = gmp.load_run(SHARED / "v2-cpu-gmp1") if (SHARED / "v2-cpu-gmp1").is_dir() else None
    if run is None:
        pytest.skip("../shared/data/16cpu-v2 is not beside this checkout")
    adv = gmp.advise(run, limits=[1.0, 1.25, 1.5], gomaxprocs=[1, 2, 3])
    best, plain = adv.iloc[0], adv[adv["burst_us"] == 0].iloc[0]
    said = adv.attrs["recommendation"]
    if best.burst_us > 0:
        assert f"without one the best is a limit of {plain.limit_cpu:g} with GOMAXPROCS={plain.gomaxprocs:.0f}" in said
    else:
        assert "without one the best" not in said
    none = gmp.advise(run, limits=[1.0, 1.25, 1.5], gomaxprocs=[1, 2, 3], bursts=[0.0])
    assert (none["burst_us"] == 0).all() and "without one the best" not in none.attrs["recommendation"]
    assert none.iloc[0][["limit_cpu", "gomaxprocs"]].tolist() == plain[["limit_cpu", "gomaxprocs"]].tolist()
    done = subprocess.run(
        [sys.executable, "-m", "gmpanalysis.cli", "advise", str(SHARED / "v2-cpu-gmp1"), "--bursts", "0", "--top", "3"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [ln.split() for ln in done.stdout.splitlines()[1:4]]
    assert all(float(r[3]) == 0 for r in rows), done.stdout


@pytest.mark.parametrize(
    ("path", "said"),
    [
        (FIXTURES / "closed-loop" / "closed-1.5cpu-gmp2", True),  # a host others kept busy (98 % against 65)
        (FIXTURES / "runs" / "cpu-0.5cpu-gmp2", False),  # replayed within a point of what it measured
        (SHARED / "cpu-1cpu-gmp1", True),  # threads outside its one P ran past the 1-CPU quota (0 % against 18)
    ],
    ids=lambda x: getattr(x, "name", str(x)),
)
def test_a_replay_that_misses_its_own_run_says_so(path, said):
    """The one run's own setting is among the candidates: where its replay's throttled share
    is more than 5 points from what it measured, the advice says by how much."""
    if not path.is_dir():
        pytest.skip(f"{path} is not beside this checkout")
    run = gmp.load_run(path)
    adv = gmp.advise(run)
    own = gmp.whatif.settings(run)
    row = adv[(adv["quota_us"] == own["quota_us"]) & (adv["gomaxprocs"] == own["gomaxprocs"]) & (adv["burst_us"] == 0)]
    got = gmp.whatif.measured(run)["throttled_pct"]
    gap = abs(float(row.iloc[0]["throttled_pct"]) - got)
    assert bool(gap > 5) is said
    text = f"Replayed at its own setting the run gives {row.iloc[0]['throttled_pct']:.0f} % of periods throttled"
    assert (text in adv.attrs["recommendation"]) is said
    assert (f"it measured {got:.0f} %" in adv.attrs["recommendation"]) is said


def test_runs_of_different_services_are_said_to_be():
    """Runs of the demo app doing different work per request are different services: the
    advice averages them only with a sentence that says so; runs of one service, none."""
    cpu = [gmp.load_run(FIXTURES / "runs" / f"cpu-0.5cpu-gmp{g}") for g in (1, 2)]
    alloc = gmp.load_run(FIXTURES / "runs" / "alloc-0.5cpu-gmp8")
    one = gmp.advise(cpu, limits=[0.5, 1], gomaxprocs=[1, 2], bursts=[0.0])
    assert "different services" not in one.attrs["recommendation"]
    two = gmp.advise([*cpu, alloc], limits=[0.5, 1], gomaxprocs=[1, 2], bursts=[0.0])
    said = two.attrs["recommendation"]
    assert "The runs are of 2 different services (cpu 30 ms; alloc 30 ms, 2048 KiB garbage, 4 MiB live)" in said


def test_an_open_loop_the_setting_falls_behind_is_said_to():
    """0.1 CPU for a 30 ms-per-request service offered ~13 requests a second answers about 3:
    the advice says it falls behind; at the limits it chooses freely, it does not."""
    if not (SHARED / "v2-cpu-gmp1").is_dir():
        pytest.skip("../shared/data/16cpu-v2 is not beside this checkout")
    run = gmp.load_run(SHARED / "v2-cpu-gmp1")
    q = run.requests
    offered = len(q) / (float(q["sched_ns"].max() - q["sched_ns"].min()) / 1e9)
    low = gmp.advise(run, max_limit=0.1, gomaxprocs=[1, 2], bursts=[0.0])
    got = float(low.iloc[0]["throughput_rps"])
    assert got < 0.9 * offered
    assert f"answers {got:.1f} of the {offered:.1f} requests per second offered" in low.attrs["recommendation"]
    free = gmp.advise(run, gomaxprocs=[1, 2], bursts=[0.0])
    assert "requests per second offered" not in free.attrs["recommendation"]


def test_a_best_limit_at_the_edge_says_so():
    """A closed loop's clients keep whatever CPU they get busy: its p99 falls to the largest
    limit tried, and the advice says why; an open loop's p99 may too (the queue drains
    faster) and is said to, without that; where the p99 stops improving, nothing is said."""
    if not (SHARED / "light-250m-gmp1").is_dir():
        pytest.skip("../shared/data/16cpu-v2 is not beside this checkout")
    closed = gmp.advise(gmp.load_run(SHARED / "light-250m-gmp1"), limits=[0.25, 1, 4], gomaxprocs=[4], bursts=[0.0])
    said = closed.attrs["recommendation"]
    assert float(closed.iloc[0]["limit_cpu"]) == 4
    assert "The best limit is the largest tried (4 CPUs)" in said and "a closed loop's clients" in said
    run = gmp.load_run(FIXTURES / "runs" / "cpu-0.5cpu-gmp1")
    open_ = gmp.advise(run, limits=[0.25, 0.5, 1, 2], bursts=[0.0])
    said = open_.attrs["recommendation"]
    assert float(open_.iloc[0]["limit_cpu"]) == 2
    assert "The best limit is the largest tried (2 CPUs)" in said and "a closed loop's clients" not in said
    inside = gmp.advise(gmp.load_run(SHARED / "v2-cpu-gmp1"), limits=[0.5, 1, 1.5, 4], gomaxprocs=[2], bursts=[0.0])
    assert float(inside.iloc[0]["limit_cpu"]) < 4 and "largest tried" not in inside.attrs["recommendation"]
