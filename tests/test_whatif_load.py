"""predict() replays the source's service under the target's offered load: the target's
arrivals (an open loop) or its clients sending for its time (a closed loop), each request
needing the CPU the source's requests needed. Runs at different limits are offered
different loads (the lab's default rate is 80 % of the quota's capacity, and so is many a
user's), so a prediction under the source's own load compares two different loads."""

import warnings
from pathlib import Path

import numpy as np
import pytest

import gmpanalysis as gmp
from gmpanalysis import whatif as W
from gmpanalysis.errors import UsageError
from gmpanalysis.replayinputs import offered_load, under_load

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures"
SHARED = ROOT.parent / "shared" / "data" / "16cpu-v2"


def _load(path: Path):
    if not path.is_dir():
        pytest.skip(f"{path} is not beside this checkout (the shared 16-CPU runs)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gmp.load_run(path)


@pytest.fixture(scope="module")
def pair():
    """The CPU-bound handler (30 ms a request) on 2 CPUs at 0.3 CPU, 8 req/s, and at 1 CPU,
    26.7 req/s (fixtures/README.md)."""
    return _load(FIX / "whatif" / "load-0.3cpu-gmp1"), _load(FIX / "whatif" / "load-1cpu-gmp2")


def _within_goals(got: dict, truth: dict) -> list[str]:
    """The issue's goals a prediction misses (throttled within 10 points here: the repeats
    of this pair moved by up to 5.8 points between recordings)."""
    miss = []
    if abs(got["p99_ms"] / truth["p99_ms"] - 1) > 0.30:
        miss.append(f"p99 {got['p99_ms']:.0f} ms for {truth['p99_ms']:.0f}")
    if abs(got["throughput_rps"] / truth["throughput_rps"] - 1) > 0.15:
        miss.append(f"throughput {got['throughput_rps']:.1f} req/s for {truth['throughput_rps']:.1f}")
    if abs(got["throttled_pct"] - truth["throttled_pct"]) > 10:
        miss.append(f"throttled {got['throttled_pct']:.1f} % for {truth['throttled_pct']:.1f}")
    ex, ex_true = got["exhausted_p50_ms"], truth["exhausted_p50_ms"]
    if not abs(ex - ex_true) <= max(3.0, 0.15 * ex_true):
        miss.append(f"exhaustion {ex:.1f} ms for {ex_true:.1f}")
    return miss


def test_a_run_at_another_limit_and_load_is_predicted_under_its_own_load(pair):
    """From the 0.3-CPU run to the 1-CPU one and back: within the goals under the target's
    load; under the source's own (8 req/s replayed at 1 CPU, 26.7 at 0.3) the same replay
    misses by far (p99 34 ms for 1,014 and 15.7 s for 475 when recorded), which is what
    the prediction compared before."""
    low, high = pair
    for src, tgt in ((low, high), (high, low)):
        truth = W.measured(tgt)
        assert _within_goals(W.predict(src, tgt), truth) == [], (src.path.name, tgt.path.name)
        own_load = W.estimate(src, **W.target_setting(tgt))
        assert not 1 / 3 < own_load["p99_ms"] / truth["p99_ms"] < 3, (src.path.name, own_load["p99_ms"])


def test_the_replay_under_a_load_serves_that_loads_requests_at_the_sources_cost(pair):
    """what_if(load=): as many requests as the load sent, at the source's CPU per request
    (the same mean cost in the model's attrs), the usage their sum; the model says
    whose load it replayed."""
    low, high = pair
    own = W.what_if(low, quota_us=100_000.0, gomaxprocs=2, unlimited=False)
    other = W.what_if(low, quota_us=100_000.0, gomaxprocs=2, load=high)
    n_high = len(offered_load(high)["sched_ns"])
    assert len(other.attrs["latency_ms"]) == n_high != len(own.attrs["latency_ms"])
    assert other.attrs["model"]["cost_ms"] == pytest.approx(own.attrs["model"]["cost_ms"], rel=0.02)
    assert other.attrs["model"]["load"] == "load-1cpu-gmp2" and own.attrs["model"]["load"] == "the run's own"
    d = W.demand(low)
    used = n_high * float(np.mean(d["cost_ns"])) / 1000  # the source's mean cost, per request of the load
    assert other["usage_us"].sum() == pytest.approx(used, rel=1e-6)


def test_a_run_under_its_own_load_or_a_copy_of_it_replays_as_before(pair, tmp_path):
    """load= the run itself, or a run of the same schedule, changes nothing: the same
    arrivals at the same times on the run's own clock, the same costs."""
    import shutil

    low, _ = pair
    setting = {"quota_us": 50_000.0, "gomaxprocs": 2}
    base = W.estimate(low, **setting)
    assert W.estimate(low, load=low, **setting) == base
    shutil.copytree(low.path, tmp_path / "copy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        copy = gmp.load_run(tmp_path / "copy")
    assert W.estimate(low, load=copy, **setting) == base


def test_under_load_cycles_the_costs_and_keeps_the_spread_of_a_closed_loop_only():
    """Costs in the service's order, again in turn where the load has more requests, at the
    service's mean cost; the load starts at the service's first request; a closed loop's
    spread is kept only where the load is a closed loop too."""
    d = {
        "sched_ns": np.array([1_000, 2_000, 5_000], dtype=np.int64),
        "cost_ns": np.array([1.0, 2.0, 3.0]),
        "concurrency": 4,
        "stop_ns": 5_000,
        "latency_shape": np.array([0.5, 1.5]),
        "gaps_ns": [],
        "span_ns": (1_000, 9_000),
        "source": "requests",
    }
    load = {"sched_ns": np.arange(5, dtype=np.int64) * 10, "concurrency": None, "stop_ns": None,
            "gaps_ns": [(15, 25)], "span_ns": (0, 60), "name": "other"}  # fmt: skip
    got = under_load(d, load)
    assert got["cost_ns"] == pytest.approx(np.array([1.0, 2.0, 3.0, 1.0, 2.0]) * 2.0 / 1.8)
    assert under_load(d, {**load, "sched_ns": load["sched_ns"][:1]})["cost_ns"].tolist() == [2.0]  # the mean
    assert got["sched_ns"].tolist() == [1_000, 1_010, 1_020, 1_030, 1_040]
    assert got["gaps_ns"] == [(1_015, 1_025)] and got["span_ns"] == (1_000, 1_060)
    assert got["concurrency"] is None and got["stop_ns"] is None and got["latency_shape"] is None
    closed = under_load(d, {**load, "concurrency": 2, "stop_ns": 40})
    assert closed["latency_shape"] is d["latency_shape"] and closed["stop_ns"] == 1_040
    assert under_load({**d, "cost_ns": 7.0}, load)["cost_ns"] == 7.0  # one mean for all


def test_a_load_is_the_run_given_not_its_directory(pair):
    """A run edited in memory (dataclasses.replace, as the package's own level views are
    made) is a load of its own though it shares its directory: the source's requests sent
    four times over, a quarter apart, are four times the arrivals and overload the quota;
    the offered load handed out is a copy, which a caller may change without moving later
    predictions."""
    import dataclasses

    import pandas as pd

    low, high = pair
    r = low.requests
    step = int((r["sched_ns"].max() - r["sched_ns"].min()) // len(r) // 4)
    more = pd.concat([r.assign(sched_ns=r["sched_ns"] + k * step) for k in range(4)], ignore_index=True)
    heavy = dataclasses.replace(low, requests=more.sort_values("sched_ns", kind="stable", ignore_index=True))
    per = W.what_if(low, quota_us=30_000.0, load=heavy)
    assert per.attrs["model"]["arrivals"] == 4 * len(W.demand(low)["sched_ns"])
    before = W.predict(low, high)
    offered_load(high)["sched_ns"] //= 2
    assert W.predict(low, high) == before


def test_a_load_without_requests_leaves_the_sources_own_and_says_so(pair, tmp_path):
    """A bundle without requests.csv tells no load: the source's own is replayed and the
    model's attrs say why; a load that is not a run is refused."""
    import shutil

    low, high = pair
    shutil.copytree(high.path, tmp_path / "bare")
    (tmp_path / "bare" / "requests.csv").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bare = gmp.load_run(tmp_path / "bare")
    per = W.what_if(low, quota_us=100_000.0, load=bare)
    assert "own" in per.attrs["model"]["load"] and "no requests within the samples" in per.attrs["model"]["load"]
    assert W.estimate(low, quota_us=100_000.0, load=bare) == W.estimate(low, quota_us=100_000.0)
    with pytest.raises(UsageError, match="load="):
        W.what_if(low, load=str(high.path))
    with pytest.raises(UsageError, match="load="):
        W.estimate(low, load=str(high.path))


def test_16_cpus_a_1_cpu_run_and_a_half_cpu_run_predict_each_other():
    """The CPU-bound handler on 16 CPUs, cgroup v2: at 1 CPU (28.5 req/s, GOMAXPROCS 1) and
    at 0.5 CPU (13.1 req/s, GOMAXPROCS 1), each predicted from the other under its own
    load: p99 and throughput within the goals; the 0.5-CPU run's throttling too (the 1-CPU
    run's 17.9 % comes from CPU outside its one P, which the replay leaves out:
    docs/validation.md)."""
    one, half = _load(SHARED / "cpu-1cpu-gmp1"), _load(SHARED / "v2-cpu-gmp1")
    for src, tgt in ((one, half), (half, one)):
        got, truth = W.predict(src, tgt), W.measured(tgt)
        assert abs(got["p99_ms"] / truth["p99_ms"] - 1) <= 0.30, (tgt.path.name, got["p99_ms"], truth["p99_ms"])
        assert abs(got["throughput_rps"] / truth["throughput_rps"] - 1) <= 0.15, tgt.path.name
    got, truth = W.predict(one, half), W.measured(half)
    assert abs(got["throttled_pct"] - truth["throttled_pct"]) <= 5, (got["throttled_pct"], truth["throttled_pct"])
