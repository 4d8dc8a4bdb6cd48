"""Where the limit is not the container's own from the start (fixtures/levels, real runs):
a container without a limit in a pod with one, and a limit set in place where there was
none. What the summary, the findings, the levels' sentences and the what-if say of them."""

from __future__ import annotations

import warnings

import pytest

import gmpanalysis as gmp
from gmpanalysis import whatif as W
from gmpanalysis.errors import UsageError
from gmpanalysis.report import findings


def _load(name: str) -> gmp.Run:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gmp.load_run(f"fixtures/levels/{name}")


def test_a_container_without_a_limit_in_a_pod_with_one_is_told_by_the_pods_quota(tmp_path):
    run = _load("ctr-none-pod0.5-gmp2")
    cmp = gmp.compare_runs([run])
    row = cmp.iloc[0]
    assert (row.quota_level, bool(row.own_level), row.quota_us, row.quota_last_us) == ("pod", False, 50_000, 50_000)
    said = findings(cmp)[0]
    assert "no CPU limit of its own (the pod's quota: 50 ms per period)" in said
    assert "the pod's quota ran out" in said and "its own quota" not in said
    sentences = " ".join(gmp.levels.describe(gmp.analyze(run)))
    assert "The container has no limit of its own" in sentences and "The pod's quota froze it" in sentences
    html = gmp.to_report([run], tmp_path / "r.html").read_text()
    assert "no quota of its own, the pod&#x27;s 50 ms per 100 ms" in html  # the report escapes the quote


def test_a_limit_set_where_there_was_none_is_a_limit_and_a_change():
    run = _load("late-none-to-0.5cpu-go124")
    cmp = gmp.compare_runs([run])
    row = cmp.iloc[0]
    assert row.cpu_limit == "none → 0.5" and row.quota_us is None and row.quota_last_us == 50_000
    said = findings(cmp)[0]
    assert "GOMAXPROCS 2 with a none → 0.5 CPU limit" in said and "no CPU limit" not in said
    # the periods before the limit count in the shares, and the classic ratio leaves them
    # out for having no limit, not for being idle (the group was busy: most used 30-150 ms)
    per = gmp.df_periods(run)
    free = per[per["quota_us"].isna()]
    assert row.unlimited_periods == len(free) > 0 and free["usage_us"].median() > 10_000
    assert f"{len(free)} of them had no limit" in said and "had no limit or was idle" in said
    assert W.resized(run) == "container: none → 50000 µs"
    other = _load("ctr-none-pod0.5-gmp2")
    with pytest.raises(UsageError, match=r"changed mid-run \(container: none → 50000 µs\)"):
        W.predict(other, run)
    own = W.predict(run, run)  # from itself: its own limits, period by period
    assert own["throttled_pct"] > 0
    # a go 1.24 module: GOMAXPROCS is NumCPU (2), which the limit set later does not move; no
    # rule would give fewer than 2 at 0.5 CPU (the go1.25 default's floor is 2): nothing to
    # blame on automaxprocs, and no drift of NumCPU's to name
    g = gmp.df_gomaxprocs(run)
    end = g.iloc[-1]
    assert "NumCPU" in end["followed"] and "automaxprocs set" not in end["drift"] and "is NumCPU" not in end["drift"]
    # where a rule following the limit would give another value (the limit at 1.5 CPUs on
    # 4 CPUs, as a 4-vCPU run of this build had it: 2 against NumCPU's 4), NumCPU is named
    from gmpanalysis.gomaxprocs import _drift

    r = {"env": None, "go1.25 default": 2, "NumCPU": 4, "automaxprocs": 1, "downward API": None}
    said = _drift(4, 1.5, [], r, {"automaxprocs": 4}, {"NumCPU", "automaxprocs"}, 10**10)
    assert said[-1] == "4 is NumCPU, the rule of this binary's runtime, which no limit moves"


def test_a_burst_is_said_with_the_limit():
    """cpu.max.burst / cpu.cfs_burst_us beside the quota wherever the limit is put in words."""
    from gmpanalysis.levels import quota_words

    assert quota_words(50_000, 50_000, 100_000, 20_000) == "50 ms per 100 ms (burst 20 ms)"
    assert quota_words(50_000, 200_000, 100_000, 0) == "50 ms per 100 ms, then 200 ms"
    assert quota_words(None, None, 100_000, 20_000) == "no limit"
    run = _load("late-none-to-0.5cpu-go124")
    cmp = gmp.compare_runs([run])
    assert cmp.iloc[0]["burst_us"] == 0 and " burst" not in findings(cmp)[0]
    cmp.loc[0, "burst_us"] = 25_000
    assert "with a none → 0.5 CPU limit and a 25 ms burst" in findings(cmp)[0]


def test_a_limit_changed_and_changed_back_is_told_in_turn(tmp_path):
    """A real resized run (0.5 → 2 CPU) with a third limits.csv row putting 0.5 back, and one
    whose burst changed instead: the summary's limit and what the what-if calls a change list
    the settings in turn, a return to the first one included."""
    import shutil

    src = "fixtures/runs/resize-0.5to2cpu-default"
    back = tmp_path / "back"
    shutil.copytree(src, back)
    lines = (back / "limits.csv").read_text().splitlines()
    last = lines[-1].split(",")
    t = int(last[0])
    lines.append(",".join([str(t + 1_000_000_000), str(t + 990_000_000), *last[2:4], "50000", "0"]))
    (back / "limits.csv").write_text("\n".join(lines) + "\n")
    run = gmp.load_run(back)
    assert gmp.compare_runs([run]).iloc[0]["cpu_limit"] == "500m → 2 → 0.5"
    assert W.resized(run) == "container: 50000 µs → 200000 µs → 50000 µs"
    burst = tmp_path / "burst"
    shutil.copytree(src, burst)
    lines = (burst / "limits.csv").read_text().splitlines()
    row = lines[-1].split(",")
    row[4], row[5] = "50000", "20000"
    (burst / "limits.csv").write_text("\n".join([*lines[:-1], ",".join(row)]) + "\n")
    assert W.resized(gmp.load_run(burst)) == "container: 50000 µs → 50000 µs (burst 20000 µs)"
