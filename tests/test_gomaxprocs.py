"""The GOMAXPROCS rules (values from the Go runtime's and Kubernetes' documented rules, see
gmpanalysis/gomaxprocs.py) and which one each shipped run followed."""

from __future__ import annotations

import copy

import pytest
from conftest import RUNS

import gmpanalysis as gmp
from gmpanalysis.gomaxprocs import RULES, explain, parse_env, rules


@pytest.mark.parametrize(
    "quota_us, period_us, ncpu, want",
    [
        # 250m and 1500m: the downward API rounds up (1, 2); Go >= 1.25 never goes below 2
        # and never above the CPUs; automaxprocs rounds down, minimum 1
        (25_000, 100_000, 8, {"go1.25 default": 2, "NumCPU": 8, "automaxprocs": 1, "downward API": 1}),
        (150_000, 100_000, 8, {"go1.25 default": 2, "NumCPU": 8, "automaxprocs": 1, "downward API": 2}),
        (350_000, 100_000, 8, {"go1.25 default": 4, "NumCPU": 8, "automaxprocs": 3, "downward API": 4}),
        (350_000, 100_000, 2, {"go1.25 default": 2, "NumCPU": 2, "automaxprocs": 3, "downward API": 4}),
        (None, 100_000, 4, {"go1.25 default": 4, "NumCPU": 4, "automaxprocs": 4, "downward API": 4}),
        (50_000, 50_000, None, {"go1.25 default": None, "NumCPU": None, "automaxprocs": 1, "downward API": 1}),
    ],
)
def test_rules(quota_us, period_us, ncpu, want):
    got = rules(quota_us, period_us, ncpu)
    assert {k: got[k] for k in want} == want and got["env"] is None


@pytest.mark.parametrize(
    "env, want", [("8", 8), ("1", 1), ("0", None), (" 4", None), ("٣", None), ("x", None), (None, None)]
)
def test_env_as_the_runtime_parses_it(env, want):
    assert parse_env(env) == want


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_every_shipped_run_names_its_rule(path):
    run = gmp.load_run(path)
    g = gmp.df_gomaxprocs(run)
    assert list(g.columns[:4]) == ["t_ns", "event", "gomaxprocs", "limit_cpus"] and set(RULES) <= set(g.columns)
    # the lab pins GOMAXPROCS in the environment: that is the rule, and the trace agrees
    assert "env" in g.attrs["rule"].split(", ")
    assert int(g["gomaxprocs"].iloc[0]) == int(run.meta["gomaxprocs_env"]) == int(run.trace.gomaxprocs["procs"].iloc[0])
    assert g["pinned"].all()
    assert g["above_limit"].iloc[0] == (int(run.meta["gomaxprocs_env"]) > 1)  # the limit is 0.5 CPU
    text = explain(run)
    assert f"GOMAXPROCS {run.meta['gomaxprocs_env']} at the start (env" in text


def test_unpinned_run_follows_the_default_rule():
    """Without the env value the GOMAXPROCS the trace shows is matched against the other
    rules (a kube bundle: nothing recorded, the trace tells)."""
    run = copy.copy(gmp.load_run(next(p for p in RUNS if p.name == "cpu-0.5cpu-gmp2")))
    run.meta = dict(run.meta, gomaxprocs_env=None, gomaxprocs_effective=None)
    g = gmp.df_gomaxprocs(run)
    # 2 CPUs, 0.5 CPU limit: Go >= 1.25 gives max(2, 1) = 2 = NumCPU; the trace shows 2. The
    # binary's Go version (>= 1.25, no containermaxprocs=0) says which rule the runtime applied
    assert run.meta["go_version"] >= "go1.25"
    assert g.attrs["rule"] == "go1.25 default" and not g["pinned"].any()
    run.meta = dict(run.meta, go_version=None)  # unknown: both runtime rules remain possible
    assert gmp.df_gomaxprocs(run).attrs["rule"] == "go1.25 default, NumCPU"
    run.meta = dict(run.meta, go_version="go1.26.8", default_godebug="containermaxprocs=0,updatemaxprocs=0")
    assert gmp.df_gomaxprocs(run).attrs["rule"] == "NumCPU"  # a go 1.24 module line
    assert "automaxprocs 1" in explain(run)
