"""The GOMAXPROCS rules (values from the Go runtime's and Kubernetes' documented rules, see
gmpanalysis/gomaxprocs.py) and which one each shipped run followed."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from conftest import RUNS

import gmpanalysis as gmp
from gmpanalysis.gomaxprocs import RULES, applicable, explain, parse_env, rules


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
    """The rule each lab run was set up with (GOMAXPROCS in env, the automaxprocs build, or the
    runtime's default) is the one named, and the trace agrees with it."""
    run = gmp.load_run(path)
    g = gmp.df_gomaxprocs(run)
    assert list(g.columns[:4]) == ["t_ns", "event", "gomaxprocs", "limit_cpus"] and set(RULES) <= set(g.columns)
    m = run.meta
    build = (m.get("lab_config") or {}).get("app_build", "default")
    rule = g.attrs["rule"].split(", ")
    first = int(run.trace.gomaxprocs["procs"].iloc[0])
    assert int(g["gomaxprocs"].iloc[0]) == first == m["gomaxprocs_effective"]
    if m["gomaxprocs_env"] is not None:
        assert "env" in rule and g["pinned"].all() and first == int(m["gomaxprocs_env"])
    elif build == "automaxprocs":
        assert rule == ["automaxprocs"] and first == 1  # floor(0.5), at least 1
    else:
        assert rule == ["go1.25 default"] and first == 2  # min(2 CPUs, max(2, ceil(0.5)))
    assert g["above_limit"].iloc[0] == (first > 1)  # the limit is 0.5 CPU at the start
    text = explain(run)
    assert f"GOMAXPROCS {first} at the start ({g.attrs['rule']})" in text
    # a resize to 2 CPUs: the pinned and the automaxprocs runs drift, the default one had no change due
    if m.get("resizes"):
        end = g[g["event"] == "end"].iloc[0]
        assert end["limit_cpus"] == 2.0 and end["go1.25 default"] == 2
        if m["gomaxprocs_env"] is not None:
            assert "pinned by GOMAXPROCS=1" in end["drift"]
        elif build == "automaxprocs":
            assert "automaxprocs set 1 once at start" in end["drift"]
        else:
            assert end["drift"] == "" and "no change was due" in text


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
    # meta.json without the version (a bundle of a process nobody could ask): the trace's
    # header tells it, as far as the format goes (go1.26 or later), and the rule with it
    run.meta = dict(run.meta, go_version=None)
    assert gmp.df_gomaxprocs(run).attrs["rule"] == "go1.25 default"
    # nothing tells the version: both runtime rules remain possible
    assert {"go1.25 default", "NumCPU"} <= applicable(None, None)
    run.meta = dict(run.meta, go_version="go1.26.8", default_godebug="containermaxprocs=0,updatemaxprocs=0")
    assert gmp.df_gomaxprocs(run).attrs["rule"] == "NumCPU"  # a go 1.24 module line
    assert "automaxprocs 1" in explain(run)


def test_a_followed_limit_change_reports_its_lag_and_stop_the_world():
    """Go >= 1.25 on a 4-CPU node, limit 1 -> 3 CPUs: the default rule moves from 2 to 3; the
    runtime re-checks about once a second and applies the change with a stop-the-world
    (kind GOMAXPROCS). Hand-made trace and limits, values from the runtime's documented rule."""
    import pandas as pd
    from handmade import make_trace

    from gmpanalysis.bundle import Run, parse_limits
    from gmpanalysis.schema import new_meta

    t0 = 10_000_000_000
    change = t0 + 2_000_000_000
    follow = change + 800_000_000
    tr = make_trace(
        t0,
        t0 + 5_000_000_000,
        stw=[(follow - 20_000, follow + 60_000, "GOMAXPROCS")],
        gomaxprocs=[(t0, 2), (follow, 3)],
    )
    limits = parse_limits(
        (
            "t_ns,prev_ns,cgroup,period_us,quota_us,burst_us\n"
            f"{t0},,container,100000,100000,0\n{change + 5_000_000},{change - 5_000_000},container,100000,300000,0\n"
        ).encode()
    )
    meta = new_meta("kube", "follow", quota_us=100_000, ncpu=4, go_version="go1.26.1", mono_start_ns=t0)
    samples = pd.DataFrame({"t_ns": [t0, t0 + 5_000_000_000]})
    run = Run(Path("hand-made"), meta, samples, None, None, limits=limits, _trace=tr)
    g = gmp.df_gomaxprocs(run)
    assert list(g["event"]) == ["start", "limit container", "gomaxprocs", "end"]
    ch = g[g["event"] == "gomaxprocs"].iloc[0]
    assert ch["gomaxprocs"] == 3 and ch["go1.25 default"] == 3
    assert ch["lag_ms"] == pytest.approx(795.0) and ch["stw_us"] == pytest.approx(80.0)
    # max(2, 1) = 2 Ps against a 1-CPU limit at the start; followed, nothing drifts afterwards
    assert g.attrs["rule"] == "go1.25 default" and g["drift"].iloc[0].startswith("2 Ps above")
    assert (g["drift"].iloc[1:] == "").all()
    assert "It changed to 3 0.8 s after the limit changed, with a 80 µs stop-the-world." in explain(run)


def test_an_ancestor_limit_the_runtime_ignores_is_named():
    """A container without a limit in a pod with one (golang/go#81180): Go >= 1.25 reads only
    its own cgroup and sets NumCPU-bounded GOMAXPROCS though the pod allows 0.5 CPU."""
    import pandas as pd

    from gmpanalysis.bundle import Run, parse_limits
    from gmpanalysis.schema import new_meta

    limits = parse_limits(
        b"t_ns,prev_ns,cgroup,period_us,quota_us,burst_us\n5,,container,100000,,0\n5,,pod,100000,50000,0\n"
    )
    meta = new_meta(
        "kube",
        "anc",
        quota_us=None,
        ncpu=8,
        go_version="go1.26.1",
        gomaxprocs_effective=8,
        mono_start_ns=5,
        levels=[{"level": "container"}, {"level": "pod"}],
    )
    samples = pd.DataFrame({"t_ns": [5, 6], "cgroup": ["container", "pod"]})
    run = Run(Path("hand-made"), meta, samples, None, None, limits=limits)
    g = gmp.df_gomaxprocs(run)
    assert g["ancestor_limit_cpus"].iloc[0] == 0.5 and np.isnan(g["limit_cpus"].iloc[0])
    # (without a limit automaxprocs gives the CPU count too: both rules stay possible)
    assert "does not read" in g["drift"].iloc[0] and "go1.25 default" in g.attrs["rule"].split(", ")
