"""One reader of the Go version a bundle records (runtime.Version() strings, as Go prints them)."""

from __future__ import annotations

import pytest

from gmpanalysis.goversion import go_minor


@pytest.mark.parametrize(
    "v, minor",
    [
        ("go1.26.8", 26),
        ("go1.22", 22),
        ("go1.25.0 X:greenteagc", 25),  # GOEXPERIMENT builds append their experiments
        ("go1.23rc1", 23),
        ("go1.24beta2", 24),
        ("go1.100.1", 100),
        ("devel go1.27-a1b2c3d Tue Nov 3 2026 +0000", None),
        ("go1.2x", None),
        ("go2.0", None),
        ("", None),
        (None, None),
        (126, None),
    ],
)
def test_go_minor(v, minor):
    assert go_minor(v) == minor


def test_both_readers_are_the_one():
    """The trace-format check and the GOMAXPROCS rules read the version through it."""
    import gmpanalysis.bundle as b
    import gmpanalysis.gomaxprocs as g

    assert b.go_minor is go_minor and g.go_minor is go_minor


def test_the_tick_and_the_period_have_one_reader_each():
    """CONFIG_HZ and the CFS period come from the bundle's meta.json through one function
    each (kernelfacts.tick_ns, cgroup.bundle_period_us), with the kernel's defaults where a
    hand-made meta lacks them; the what-if replay and the period table read them there."""
    import gmpanalysis as gmp
    from gmpanalysis.cgroup import DEFAULT_PERIOD_US, bundle_period_us
    from gmpanalysis.kernelfacts import DEFAULT_HZ, tick_ns
    from gmpanalysis.whatif import settings

    assert tick_ns({"hz": 1000}) == 1_000_000 and tick_ns({"hz": 300}) == 3_333_333
    for bad in ({}, {"hz": None}, {"hz": 0}, {"hz": "250"}, {"hz": True}):
        assert tick_ns(bad) == 1_000_000_000 // DEFAULT_HZ
    assert bundle_period_us({"period_us": 20_000}) == 20_000 and bundle_period_us({}) == DEFAULT_PERIOD_US
    run = gmp.load_run("fixtures/runs/cpu-0.5cpu-gmp2")
    run.meta["hz"] = 1000
    s = settings(run)
    assert s["hz"] == 1000 and s["tick_phase_ns"] < 1_000_000
