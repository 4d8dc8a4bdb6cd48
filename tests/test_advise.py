"""advise: settings ranked by the what-if replay, on every shipped bundle."""

from __future__ import annotations

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
    key = list(zip(t.throttled_pct, t.stall_ms_per_s, t.cost_cpu, strict=True))
    assert key == sorted(key)  # fewest throttled periods first
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


def test_bad_settings_are_named():
    run = _load(Path("fixtures/runs/cpu-0.5cpu-gmp2"))
    with pytest.raises(UsageError, match="objective"):
        advise(run, objective="fast")
    with pytest.raises(UsageError, match="at least one run"):
        advise([])


def test_the_command_prints_the_ranking_and_the_sentence():
    out = subprocess.run(
        [sys.executable, "-m", "gmpanalysis.cli", "advise", "fixtures/runs/cpu-0.5cpu-gmp1", "--objective", "cost",
         "--max-limit", "1", "--top", "3"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "For cost: a CPU limit of" in out and "go1.25 default" in out and "the model's error" in out
