"""The Go execution trace reader, checked against Go's own reader (golang.org/x/exp/trace,
through collectors/cmd/gmp-tracedump) on real traces of every supported format version.

x/exp/trace forces each event time to be later than the one before, in an order that
finishes one generation before the next; where that moved a time, the time it reports is
not a multiple of the 64 ns tick (e.g. lastTs+1). Our reader keeps the raw wire times. So:
where x/exp's time is on the tick it must equal ours exactly; where it is not, ours must
be earlier or equal (x/exp only ever moves times forward).
"""

from __future__ import annotations

import json
import random
import subprocess
import warnings
from collections import defaultdict

import numpy as np
import pytest
from conftest import FIXTURES, RUNS

import gmpanalysis as gmp
from gmpanalysis.gotrace import TruncatedTraceWarning, UnknownVersionWarning, read_trace

TRACES = sorted((FIXTURES / "traces").glob("*.trace")) + [p / "trace.out" for p in RUNS if (p / "trace.out").exists()]
IDS = [p.name if p.suffix == ".trace" else p.parent.name for p in TRACES]


def oracle(bins, path):
    r = subprocess.run(
        [str(bins["gmp-tracedump"]), "--intervals", str(path)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def same_time(ours: int, theirs: int) -> bool:
    return ours == theirs if theirs % 64 == 0 else ours <= theirs


@pytest.fixture(scope="module")
def parsed():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return {p: read_trace(p) for p in TRACES}


def test_fixture_versions(parsed):
    versions = {tr.meta["version"] for tr in parsed.values()}
    assert {22, 23, 25, 26} <= versions


@pytest.mark.parametrize("path", TRACES, ids=IDS)
def test_matches_go_reader(bins, parsed, path):
    tr, o = parsed[path], oracle(bins, path)
    # STW: same ranges, kinds and goroutines
    ours = list(tr.stw[["start_ns", "end_ns", "kind", "g"]].itertuples(index=False))
    theirs = o["stw"] or []
    assert len(ours) == len(theirs)
    for (a, b, k, g), (oa, ob, ok, og) in zip(ours, sorted(theirs, key=lambda x: x[0]), strict=True):
        assert (k, g) == (ok, og)
        assert same_time(a, oa) and same_time(b, ob), ((a, b), (oa, ob))
    # GC mark phases
    gc = list(tr.gc[["start_ns", "end_ns"]].itertuples(index=False))
    assert len(gc) == len(o["gc"] or [])
    for (a, b), (oa, ob) in zip(gc, o["gc"] or [], strict=True):
        assert same_time(a, oa) and same_time(b, ob)
    # GOMAXPROCS changes
    gm = list(tr.gomaxprocs.itertuples(index=False))
    assert [v for _, v in gm] == [v for _, v in o["gomaxprocs"]]
    assert all(same_time(t, ot) for (t, _), (ot, _) in zip(gm, o["gomaxprocs"], strict=True))
    # running intervals: one to one per goroutine, same P
    mine, theirs_i = defaultdict(list), defaultdict(list)
    for g, p, a, b in tr.running[["g", "p", "start_ns", "end_ns"]].itertuples(index=False):
        mine[g].append((a, b, p))
    for g, p, a, b in o["intervals"]:
        theirs_i[g].append((a, b, p))
    assert mine.keys() == theirs_i.keys()
    for g in mine:
        A, B = sorted(mine[g]), sorted(theirs_i[g])
        assert len(A) == len(B), g
        for (a, b, p), (oa, ob, op) in zip(A, B, strict=True):
            assert p == op and same_time(a, oa) and same_time(b, ob), (g, (a, b, p), (oa, ob, op))
    # totals: exact where x/exp moved nothing
    nudged = sum(1 for _, _, a, b in o["intervals"] if a % 64 or b % 64)
    if nudged == 0:
        tot = (tr.running.end_ns - tr.running.start_ns).groupby(tr.running.p).sum()
        assert {str(k): int(v) for k, v in tot.items()} == {k: v for k, v in o["running_p_ns"].items() if v}


def test_nudges_are_bounded_and_explained(bins, parsed):
    """How far x/exp moved interval ends on the shipped traces (documented bound)."""
    worst = 0
    for path in TRACES:
        o = oracle(bins, path)
        tr = parsed[path]
        mine = defaultdict(list)
        for g, a, b in tr.running[["g", "start_ns", "end_ns"]].itertuples(index=False):
            mine[g].append((a, b))
        for g in mine:
            A = sorted(mine[g])
            B = sorted((a, b) for gg, _, a, b in o["intervals"] if gg == g)
            for (a, b), (oa, ob) in zip(A, B, strict=True):
                worst = max(worst, oa - a, ob - b)
    # throttled lab traces: a thread frozen by the quota keeps writing generation N while
    # others began N+1; x/exp holds N+1 back, up to one CFS period late
    assert worst < 150_000_000


def test_clock_snapshots_agree_with_ticks(parsed):
    n = 0
    for tr in parsed.values():
        for snap in tr.meta["clock_snapshots"]:
            assert abs(snap["mono_ns"] - snap["trace_ns"]) <= 256
            n += 1
    assert n >= 2  # 1.25 and 1.26 traces carry them


def test_tables_hold_together(parsed):
    for path, tr in parsed.items():
        r = tr.running
        assert (r.end_ns >= r.start_ns).all(), path
        # a P runs one goroutine at a time
        for _, g in r[r.p >= 0].sort_values("start_ns").groupby("p"):
            assert (g.start_ns.to_numpy()[1:] >= g.end_ns.to_numpy()[:-1]).all(), path
        assert (tr.stw.end_ns >= tr.stw.start_ns).all()
        assert tr.meta["first_ns"] <= tr.meta["last_ns"]
        assert tr.heap.t_ns.is_monotonic_increasing


def test_gc_workers_and_assists_on_the_alloc_run():
    tr = gmp.load_run(next(p for p in RUNS if p.name.startswith("alloc"))).trace
    labels = set(tr.running.label)
    assert any(lab.startswith("GC (") for lab in labels)
    assert len(tr.assist) > 0 and len(tr.sweep) > 0 and len(tr.gc) >= 5
    assert tr.heap.heap_goal_bytes.notna().any()
    kinds = set(tr.stw.kind)
    assert {"GC mark termination", "GC sweep termination"} <= kinds


def test_logs_and_stw_kinds_from_tracegen(parsed):
    tr = next(t for p, t in parsed.items() if p.name == "go1.26.trace")
    assert (tr.logs.category == "probe").sum() >= 5
    assert {"GOMAXPROCS", "read mem stats"} <= set(tr.stw.kind)
    assert set(tr.gomaxprocs.procs) >= {2, 4}


def test_lab_trace_sits_in_its_capture_window():
    for p in RUNS:
        run = gmp.load_run(p)
        w = run.meta["trace"]
        assert w["mono_request_ns"] <= run.trace.meta["first_ns"] <= run.trace.meta["last_ns"] <= w["mono_done_ns"]


# --- bad input --------------------------------------------------------------------------


def test_old_format_is_refused_with_advice():
    with pytest.raises(gmp.TraceFormatError, match=r"Go 1.21 trace format .* re-record with Go >= 1.22"):
        read_trace(b"go 1.21 trace\x00\x00\x00" + b"\x00" * 64)


def test_not_a_trace():
    with pytest.raises(gmp.TraceFormatError, match="not a Go execution trace"):
        read_trace(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)


def test_newer_version_is_read_with_a_warning():
    data = (FIXTURES / "traces" / "go1.26.trace").read_bytes()
    with pytest.warns(UnknownVersionWarning, match="go 1.28 is newer"):
        tr = read_trace(b"go 1.28 trace\x00\x00\x00" + data[16:])
    assert len(tr.stw) == len(read_trace(data).stw)


@pytest.mark.parametrize("name", ["tiny-go1.22.trace", "tiny-go1.26.trace"])
def test_truncation_at_every_offset(name):
    data = (FIXTURES / "traces" / name).read_bytes()
    full = read_trace(data)
    assert full.meta["generations"] == 2 and full.meta["truncated"] is None
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncatedTraceWarning)
        for cut in range(len(data)):
            try:
                tr = read_trace(data[:cut])
            except gmp.TraceFormatError as e:
                assert cut < 16 or "offset" in str(e)
                seen.add("error")
                continue
            g = tr.meta["generations"]
            assert g <= 2
            if tr.meta["truncated"] is not None:
                assert tr.meta["truncated"] <= cut
                seen.add(f"truncated-{g}")
            # complete generations are decoded whole: their STWs are the full trace's first ones
            assert list(tr.stw.start_ns) == list(full.stw.start_ns[: len(tr.stw)])
    assert {"error", "truncated-0", "truncated-1"} <= seen


def test_truncated_warning_names_the_offset():
    from gmpanalysis.gotrace.wire import split_generations

    data = (FIXTURES / "traces" / "go1.26.trace").read_bytes()
    gens, _ = split_generations(data, 26, "x")
    cut = gens[0].end + 1000  # inside the second generation
    with pytest.warns(TruncatedTraceWarning, match=r"offset \d+ .* the 1 complete generation"):
        tr = read_trace(data[:cut])
    assert tr.meta["truncated"] is not None and tr.meta["generations"] == 1


def test_mutations_raise_only_trace_format_errors():
    """A seeded sample of byte mutations; benchmarks/fuzz_trace.py runs 100 000 and more."""
    rng = random.Random(7)
    data = bytearray((FIXTURES / "traces" / "tiny-go1.26.trace").read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(400):
            m = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                m[rng.randrange(16, len(m))] = rng.randrange(256)
            try:
                read_trace(bytes(m))
            except gmp.TraceFormatError:
                pass


def test_missing_file():
    with pytest.raises(gmp.TraceFormatError, match="no such file"):
        read_trace("/nonexistent/trace.out")


def test_bytes_and_path_agree():
    p = FIXTURES / "traces" / "go1.22.trace"
    a, b = read_trace(p), read_trace(p.read_bytes())
    assert a.meta["events"] == b.meta["events"] and np.array_equal(a.running.start_ns, b.running.start_ns)
