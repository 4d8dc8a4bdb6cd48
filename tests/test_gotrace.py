"""The Go execution trace reader, checked against Go's own reader (golang.org/x/exp/trace,
through collectors/cmd/gmp-tracedump) on real traces of every supported format version;
see oracle.py for how raw and x/exp times compare."""

from __future__ import annotations

import random
import re
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES, RUNS
from oracle import assert_matches, oracle

import gmpanalysis as gmp
from gmpanalysis.gotrace import TruncatedTraceWarning, UnknownVersionWarning, read_trace

TRACES = sorted((FIXTURES / "traces").glob("*.trace")) + [p / "trace.out" for p in RUNS if (p / "trace.out").exists()]
IDS = [p.name if p.suffix == ".trace" else p.parent.name for p in TRACES]


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
    o = oracle(bins, path)
    assert not o.get("error"), o.get("error")
    assert_matches(parsed[path], o)


def test_nudges_are_bounded(bins, parsed):
    """How far x/exp moved times on the shipped traces. On throttled lab traces a thread
    frozen by the quota keeps writing generation N while others began N+1; x/exp holds the
    N+1 events back until N is done: up to about one CFS period (100 ms) late."""
    worst = max(assert_matches(parsed[p], oracle(bins, p)) for p in TRACES)
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
def test_truncation_at_every_structural_offset(name):
    """Every cut near a structure (the header, each batch's header and payload edges, each
    generation's edges) and every 7th byte elsewhere: the cases a cut can tell apart, at a
    fifth of the cost of every byte (benchmarks/fuzz_trace.py adds random cuts to its mutants)."""
    from gmpanalysis.gotrace.wire import split_generations

    data = (FIXTURES / "traces" / name).read_bytes()
    full = read_trace(data)
    assert full.meta["generations"] == 2 and full.meta["truncated"] is None
    gens, _ = split_generations(data, full.meta["version"], name)
    edges = {0, len(data)} | {x for g in gens for x in (g.start, g.end)}
    edges |= {x for g in gens for b in g.batches for x in (b.start, b.end)}
    cuts = set(range(0, len(data), 7)) | {c + d for c in edges for d in range(-24, 25) if 0 <= c + d < len(data)}
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncatedTraceWarning)
        for cut in sorted(cuts):
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


@pytest.mark.parametrize("name", ["tiny-go1.22.trace", "tiny-go1.26.trace"])
def test_a_tail_of_zeros_is_a_cut(name):
    """A crash after the file's size grew but before its last pages reached the disk leaves
    zero bytes in their place: at every offset from the last generation's start on, the
    bytes from there are zeros (the size kept, and grown by 4 KiB), and the complete
    generations before them are read, with a warning that says so. Zeros beginning in a
    batch's last ZERO_SLACK bytes look like its own zero arguments: the batch is kept and
    the decoder refuses what they broke, as it did before."""
    from gmpanalysis.gotrace.wire import ZERO_SLACK, ZERO_TAIL_MIN, split_generations, zero_run_start

    data = (FIXTURES / "traces" / name).read_bytes()
    full = read_trace(data)
    gens, _ = split_generations(data, full.meta["version"], name)
    ends = [b.end for g in gens for b in g.batches]
    for at in range(gens[-1].start, len(data) + 1, 7):
        for extra in (0, 4096):
            damaged = data[:at] + bytes(len(data) - at + extra)
            if damaged == data or zero_run_start(damaged) > len(damaged) - ZERO_TAIL_MIN:
                continue  # the trace's own zeros at its end, or too few to be told from them
            z = zero_run_start(damaged)
            if any(0 < e - z <= ZERO_SLACK for e in ends):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", TruncatedTraceWarning)
                    try:
                        read_trace(damaged)
                    except gmp.TraceFormatError:
                        pass
                continue
            with pytest.warns(TruncatedTraceWarning, match=r"zero bytes from offset \d+"):
                tr = read_trace(damaged)
            # the first generation stands whole; the last one where the zeros begin past it
            assert tr.meta["generations"] >= len(gens) - 1
            assert list(tr.stw.start_ns) == list(full.stw.start_ns[: len(tr.stw)])
    with pytest.warns(TruncatedTraceWarning, match=rf"ends in 4096 zero bytes from offset {len(data)}"):
        tr = read_trace(data + bytes(4096))
    assert tr.meta["generations"] == len(gens) and list(tr.stw.start_ns) == list(full.stw.start_ns)


def test_zeros_after_a_batch_that_ends_in_a_zero_and_inside_a_header():
    """A batch whose last event ends in a zero argument, then the crash's zeros: the batch is
    whole, and the file reads as at a clean end there (its generation not closed: the ones
    before it). Zeros inside a batch's header
    (the batch being written): a cut there, as the end of the file there would be."""
    from gmpanalysis.gotrace.wire import split_generations

    data = (FIXTURES / "traces" / "go1.22.trace").read_bytes()
    gens, _ = split_generations(data, 22, "x")
    zero_end = [b.end for g in gens for b in g.batches if data[b.end - 1] == 0 and b.end != g.end]
    assert zero_end, "the fixture has a batch ending in a zero byte"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncatedTraceWarning)
        for end in zero_end[:2] + zero_end[-2:]:
            clean, crashed = read_trace(data[:end]), read_trace(data[:end] + bytes(4096))
            assert crashed.meta["generations"] == clean.meta["generations"]
            assert crashed.meta["zero_tail"] is not None and crashed.meta["truncated"] == clean.meta["truncated"]
        tiny = (FIXTURES / "traces" / "tiny-go1.22.trace").read_bytes()
        last = split_generations(tiny, 22, "x")[0][-1].batches[-1]
        for keep in range(1, last.start - last.at):
            cut = read_trace(tiny[: last.at + keep])
            crashed = read_trace(tiny[: last.at + keep] + bytes(4096))
            assert (crashed.meta["generations"], crashed.meta["truncated"]) == (
                cut.meta["generations"],
                cut.meta["truncated"],
            ), keep


def test_a_go_1_22_generation_before_a_batch_of_an_impossible_one_is_yielded_whole():
    """Before 1.26 a batch of another generation ends the one before: that one is whole, and
    comes before the error the impossible generation (0) raises."""
    from gmpanalysis.gotrace.wire import GenerationSplitter, split_generations

    data = bytearray((FIXTURES / "traces" / "tiny-go1.22.trace").read_bytes())
    gens, _ = split_generations(bytes(data), 22, "x")
    data[gens[1].batches[0].at + 1] = 0  # its generation varint
    got = []
    with pytest.raises(gmp.TraceFormatError, match="generation 0 does not exist"):
        for g in GenerationSplitter(bytes(data), 22, "x"):
            got.append(g)
    assert [(g.gen, g.start, g.end) for g in got] == [(gens[0].gen, gens[0].start, gens[0].end)]


def test_two_traces_in_one_file_are_named_as_such():
    data = (FIXTURES / "traces" / "tiny-go1.26.trace").read_bytes()
    with pytest.raises(gmp.TraceFormatError, match=rf"offset {len(data)}: a second trace's header \('go 1.26 trace'\)"):
        read_trace(data + data)


def test_a_run_s_unreadable_trace_says_what_to_do(tmp_path):
    """The library names the way on (the counters need no trace); the command line takes it
    itself, and its note keeps the damage, not the advice."""
    import shutil

    d = tmp_path / "run"
    shutil.copytree(RUNS[0], d)
    with open(d / "trace.out", "ab") as f:
        f.write(b"\x07" * 100)
    run = gmp.load_run(d)
    with pytest.raises(gmp.TraceFormatError, match=r"found 0x07.*move trace.out out of .* without it"):
        gmp.df_periods(run)
    from gmpanalysis.bundle import without_trace

    with pytest.raises(gmp.TraceFormatError) as caught:
        run.trace  # noqa: B018
    bare = without_trace(run, caught.value)
    assert "found 0x07" in bare.notes[-1] and "move trace.out" not in bare.notes[-1]
    assert len(gmp.df_periods(bare)) > 10


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


def test_missing_file_is_not_found_and_a_directory_is_named(tmp_path):
    with pytest.raises(gmp.NotFoundError, match="no such file") as e:
        read_trace(tmp_path / "trace.out")
    assert isinstance(e.value, FileNotFoundError)  # caught the usual way too
    with pytest.raises(gmp.TraceFormatError, match="is a directory"):
        read_trace(tmp_path)
    with pytest.raises(gmp.NotFoundError, match="no such directory"):
        gmp.load_run(tmp_path / "nope")


def test_bytes_and_path_agree():
    p = FIXTURES / "traces" / "go1.22.trace"
    a, b = read_trace(p), read_trace(p.read_bytes())
    assert a.meta["events"] == b.meta["events"] and np.array_equal(a.running.start_ns, b.running.start_ns)


TABLE_NAMES = ("running", "sweep", "stw", "assist", "logs", "labels", "gc", "gomaxprocs", "heap")


@pytest.mark.parametrize("path", TRACES, ids=IDS)
def test_streaming_gives_the_tables_of_a_whole_file_read(monkeypatch, path):
    """The reader decodes groups of generations and carries each thread's state across
    them: one generation per group, and tiny groups of threads, give the very same tables
    as reading the file in one group."""
    from gmpanalysis.gotrace import reader, tables

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        monkeypatch.setattr(reader, "CHUNK_BYTES", 1 << 40)
        whole = read_trace(path)
        monkeypatch.setattr(reader, "CHUNK_BYTES", 1)
        monkeypatch.setattr(tables, "GROUP_EVENTS", 500)
        streamed = read_trace(path)
    assert whole.meta["generations"] >= 2  # there is a boundary to cross
    for t in TABLE_NAMES:
        a, b = getattr(whole, t), getattr(streamed, t)
        assert a.equals(b), t


def _same_rows(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """The same rows, whatever their order."""
    if len(a) != len(b) or list(a.columns) != list(b.columns):
        return False
    key = [c for c in a.columns if a[c].dtype != "category"]
    sa = a.sort_values(key, kind="stable").reset_index(drop=True)
    sb = b.sort_values(key, kind="stable").reset_index(drop=True)
    return all(sa[c].astype(object).fillna(-1).equals(sb[c].astype(object).fillna(-1)) for c in a.columns)


@pytest.mark.parametrize("path", TRACES, ids=IDS)
def test_iter_generations_yields_every_row_once(path):
    """Rows come in the generation where they end; together they are read_trace's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = read_trace(path)
        parts = list(gmp.iter_generations(path))
    assert len(parts) == whole.meta["generations"]
    assert sum(p.meta["events"] for p in parts) == whole.meta["events"]
    assert [p.meta["generation"] for p in parts] == sorted({p.meta["generation"] for p in parts})
    for t in TABLE_NAMES:
        got = pd.concat([getattr(p, t) for p in parts], ignore_index=True)
        assert _same_rows(getattr(whole, t), got), t
    # a row comes in the generation where it ends: never before its end
    for p in parts[:-1]:
        assert (p.running.end_ns <= p.meta["last_ns"]).all()
        assert not p.running.open.any()


def test_intervals_gc_and_stw_across_generation_boundaries():
    """On real traces: intervals that cross a generation boundary come out whole (one row,
    its true start) both when streaming and per generation; so does a GC mark phase that
    spans one."""
    crossed = {"running": 0, "gc": 0}
    for path in TRACES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parts = list(gmp.iter_generations(path))
        for i, p in enumerate(parts[1:], start=1):
            lo = parts[i - 1].meta["last_ns"]  # the previous generation's last event
            crossed["running"] += int((p.running.start_ns < lo).sum())
            crossed["gc"] += int((p.gc.start_ns < lo).sum())
    assert crossed["running"] > 0 and crossed["gc"] > 0, crossed


def test_tables_builds_only_what_is_asked():
    path = FIXTURES / "traces" / "go1.25.trace"
    full = read_trace(path)
    some = read_trace(path, tables=("stw", "gc", "gomaxprocs"))
    assert some.meta["tables"] == ("stw", "gc", "gomaxprocs")
    for t in TABLE_NAMES:
        if t in some.meta["tables"]:
            assert getattr(some, t).equals(getattr(full, t)), t
        else:
            assert len(getattr(some, t)) == 0 and list(getattr(some, t).columns) == list(getattr(full, t).columns)
    only_global = read_trace(path, tables="gc")
    assert only_global.gc.equals(full.gc) and len(only_global.stw) == 0
    with pytest.raises(gmp.UsageError, match="unknown table"):
        read_trace(path, tables=("stw", "runing"))
    with pytest.raises(gmp.UsageError, match="give table names"):
        read_trace(path, tables=5)


@pytest.mark.parametrize("name", ["alloc-0.5cpu-gmp8", "cpu-0.5cpu-gmp8"])
def test_window_decodes_only_the_generations_it_overlaps(name):
    path = next(p for p in TRACES if p.parent.name == name)
    full = read_trace(path)
    parts = list(gmp.iter_generations(path))
    assert len(parts) >= 3
    # a window inside the second generation's events
    lo, hi = parts[1].meta["first_ns"], parts[1].meta["last_ns"]
    t0, t1 = lo + (hi - lo) // 3, lo + 2 * (hi - lo) // 3
    w = read_trace(path, window=(t0, t1))
    assert w.meta["generations_decoded"] < full.meta["generations"]
    assert w.meta["window"] == (t0, t1)
    for t in ("running", "stw", "gc", "assist", "sweep"):
        df = getattr(w, t)
        assert ((df.end_ns >= t0) & (df.start_ns <= t1)).all(), t
        f = getattr(full, t)
        want = f[(f.end_ns >= t0) & (f.start_ns <= t1)]
        # what began before the first decoded generation starts there (its status restated)
        first = w.meta["first_ns"]
        assert _same_rows(want[want.start_ns >= first].reset_index(drop=True), df[df.start_ns >= first]), t
        assert len(df) == len(want), t
    assert len(w.gomaxprocs) >= 1 and w.gomaxprocs.procs.iloc[-1] == full.gomaxprocs.procs.iloc[-1]
    with pytest.raises(gmp.UsageError, match="ends before it starts"):
        read_trace(path, window=(t1, t0))


# --- GC work on Ps (gcwork.py) -----------------------------------------------------------


def test_assist_on_p_matches_a_plain_loop(parsed):
    from handmade import assist_on_p_loop

    from gmpanalysis.gotrace.gcwork import df_assist_on_p

    seen = 0
    for path, tr in parsed.items():
        got = df_assist_on_p(tr)
        assert list(got.columns) == ["g", "p", "start_ns", "end_ns"] and (got.dtypes == "int64").all()
        assert list(got.itertuples(index=False, name=None)) == assist_on_p_loop(tr), path
        seen += len(got)
    assert seen > 100


def test_assist_on_p_lies_inside_an_assist_and_a_run(parsed):
    from gmpanalysis.gotrace.gcwork import df_assist_on_p, is_gc_worker

    tr = next(t for p, t in parsed.items() if p.parent.name.startswith("alloc"))
    on_p, a, r = df_assist_on_p(tr), tr.assist, tr.running
    assert len(on_p) > 0
    for g, p, s, e in on_p.itertuples(index=False, name=None):
        assert e > s
        assert ((a.g == g) & (a.start_ns <= s) & (a.end_ns >= e)).any()
        assert ((r.g == g) & (r.p == p) & (r.start_ns <= s) & (r.end_ns >= e)).any()
    # per goroutine: no more than its assist ranges, no more than it ran
    d = (on_p.end_ns - on_p.start_ns).groupby(on_p.g).sum()
    ranges = (a.end_ns - a.start_ns).groupby(a.g).sum()
    ran = (r.end_ns - r.start_ns).groupby(r.g).sum()
    assert (d <= ranges[d.index]).all() and (d <= ran[d.index]).all()
    # on the throttled alloc run most of the assist ranges is time off a P
    assert d.sum() < 0.1 * ranges.sum()
    # workers and assisting goroutines are different goroutines: nothing counted twice
    assert not set(tr.running.g[is_gc_worker(tr)]) & set(a.g)


def test_parked_assist_is_not_gc_cpu():
    """Fails on the old behaviour (whole assist ranges): goroutine 5 assists from 100 to 1000
    but runs only [100, 200) on P0 and [700, 800) on P1; parked in between."""
    from handmade import make_trace

    from gmpanalysis.gotrace.gcwork import df_assist_on_p, df_gc_on_p, gc_cpu

    tr = make_trace(
        0,
        1000,
        running=[
            (5, 0, 100, 200),
            (5, 1, 700, 800),
            (6, 0, 200, 700),
            (9, 1, 0, 100, "GC (dedicated)"),
            (9, 1, 300, 350),  # the same worker, no label (mark termination): still GC
            (8, 2, 0, 1000, "GC (idle)"),
        ],
        assist=[(5, 100, 1000)],
        gomaxprocs=[(0, 4)],
    )
    assert list(df_assist_on_p(tr).itertuples(index=False, name=None)) == [(5, 0, 100, 200), (5, 1, 700, 800)]
    d = gc_cpu(tr)
    assert d["assist_on_p_ns"] == 200 and d["assist_ranges_ns"] == 900
    assert d["worker_ns"] == 1150 and d["worker_idle_ns"] == 1000 and d["worker_unlabelled_ns"] == 50
    assert d["running_ns"] == 1850 and d["window_ns"] == 1000
    assert d["gc_cpu_pct"] == pytest.approx(100 * 1350 / 1850)  # whole ranges: 100 * 2050 / 1850
    half = gc_cpu(tr, 0, 500), gc_cpu(tr, 500, 1000)
    for k in ("running_ns", "worker_ns", "assist_on_p_ns", "assist_ranges_ns"):
        assert half[0][k] + half[1][k] == d[k], k
    kinds = df_gc_on_p(tr).groupby("kind").size().to_dict()
    assert kinds == {"GC (dedicated)": 1, "GC (idle)": 1, "GC (no mode)": 1, "assist": 2}
    assert "GC (idle)" not in set(df_gc_on_p(tr, idle_workers=False).kind)


def test_gc_cpu_on_real_traces(parsed):
    from gmpanalysis.gotrace.gcwork import gc_cpu

    for path, tr in parsed.items():
        d = gc_cpu(tr)
        assert d["assist_on_p_ns"] <= d["assist_ranges_ns"], path
        assert d["worker_idle_ns"] + d["worker_unlabelled_ns"] <= d["worker_ns"] <= d["running_ns"], path
        assert d["worker_ns"] + d["assist_on_p_ns"] <= d["running_ns"], path
        assert 0 <= d["gc_cpu_pct"] <= 100 or d["running_ns"] == 0, path


def _clash_builder(chunks):
    """A Builder fed running rows directly, chunk by chunk (each a dict of columns in file
    order), as the decoded threads would give them."""
    from gmpanalysis.gotrace import tables

    b = tables.Builder(frozenset({"running"}))
    for rows in chunks:
        n = len(rows["g"])
        group = {k: np.asarray(v) for k, v in rows.items()}
        group["done"] = group["end"] >= 0
        group.update(
            p=np.zeros(n, np.int32),
            label_pos=np.zeros(0, np.int64),
            label_names=[],
            orphan_labels=[],
            m_ids=np.unique(group["m"]),
            first_stop_t=np.full(len(np.unique(group["m"])), -1),
            last_start_row=np.full(len(np.unique(group["m"])), -1),
            first_sweep_end=(np.full(len(np.unique(group["m"])), -1),) * 3,
            sweep={k: np.zeros(0, bool if k == "done" else np.int64) for k in tables.SWEEP_COLS},
        )
        group["gen"] = group["gen"].astype(np.int32)
        group["seq"] = group["seq"].astype(np.int32)
        b.feed_running([group])
        b.flush()
    return b


@pytest.mark.parametrize("split", [None, 2, 3, 4])
def test_overlapping_intervals_of_one_goroutine_are_put_in_order(split):
    """Two threads' clocks disagree: goroutine 7 seems to start on a second thread before
    it left the first. The later interval starts when the first ends (by sequence number
    within a generation, else by time), whether the two rows come in one chunk or in two."""
    rows = {
        "g": [5, 7, 9, 7, 5],
        "m": [1, 1, 2, 2, 1],
        "start": [90, 100, 120, 150, 300],
        "end": [110, 200, 130, 260, 310],
        "gen": [1, 1, 1, 1, 1],
        "seq": [-1, 3, -1, 4, -1],
    }

    def run(rows, split):
        chunks = [rows]
        if split is not None:
            chunks = [{k: v[:split] for k, v in rows.items()}, {k: v[split:] for k, v in rows.items()}]
        if split is not None:  # a chunk is whole generations: the second is a later one
            chunks[1]["gen"] = [2] * len(chunks[1]["gen"])
        t = _clash_builder(chunks).finish(1000)["running"]
        return list(t.start_ns), list(t.end_ns)

    assert run(rows, split) == ([90, 100, 120, 200, 300], [110, 200, 130, 260, 310])
    # the sequence numbers say the later-looking interval came first (same generation only)
    swapped = {**rows, "seq": [-1, 4, -1, 3, -1]}
    if split is None or split >= 4:
        assert run(swapped, split) == ([90, 120, 150, 260, 300], [110, 130, 260, 260, 310])
    # no overlap: nothing moves
    apart = {**rows, "end": [110, 150, 130, 260, 310]}
    assert run(apart, split) == (rows["start"], apart["end"])


def test_an_interval_still_open_is_checked_once_it_ends():
    """Goroutine 7 starts on thread 2 while its interval on thread 1 is still open at the
    end of the chunk: the pair is kept, and settled once thread 1 stops it (later chunk)."""
    first = {"g": [7, 7], "m": [1, 2], "start": [100, 150], "end": [-1, 260], "gen": [1, 1], "seq": [3, 4]}
    b = _clash_builder([first])
    b.run.col("end")[0] = 200  # what a later chunk's stop on thread 1 does
    t = b.finish(1000)["running"]
    assert list(t.start_ns) == [100, 200] and list(t.end_ns) == [200, 260]


def test_a_big_trace_is_read_behind_a_progress_bar(monkeypatch, capsys):
    """The command line sets PROGRESS_BAR_BYTES on a terminal: traces that big show a tqdm
    bar on stderr; smaller ones, and the library's default, show nothing."""
    from gmpanalysis.gotrace import reader

    path = FIXTURES / "traces" / "go1.25.trace"
    read_trace(path)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(reader, "PROGRESS_BAR_BYTES", path.stat().st_size + 1)
    read_trace(path)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(reader, "PROGRESS_BAR_BYTES", 1000)
    read_trace(path)
    err = capsys.readouterr().err
    assert "go1.25.trace:" in err and "B/s" in err, err  # tqdm's bar, named after the file
    seen = []
    read_trace(path, progress=seen.append)  # the offsets a bar is fed: up to the end
    assert seen == sorted(seen) and seen[-1] == path.stat().st_size
    assert capsys.readouterr().err == ""  # a progress function of one's own replaces the bar


@pytest.mark.parametrize("path", TRACES, ids=IDS)
def test_compiled_loops_and_numpy_give_the_same_tables(monkeypatch, path):
    """With numba installed ([fast] extra) the reader walks events and follows threads'
    goroutines in compiled loops; without it, in numpy. Same tables, full and selective."""
    from gmpanalysis.gotrace import kernels

    if not kernels.AVAILABLE:
        pytest.skip("numba is not installed here (the [fast] extra): only the numpy code can run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for tables in (None, ("stw", "gc", "gomaxprocs", "assist", "logs")):
            monkeypatch.setattr(kernels, "ENABLED", True)
            fast = read_trace(path, tables=tables)
            monkeypatch.setattr(kernels, "ENABLED", False)
            slow = read_trace(path, tables=tables)
            for t in TABLE_NAMES:
                assert _same_rows(getattr(fast, t), getattr(slow, t)), (tables, t)
            assert fast.meta == slow.meta


def test_numpy_code_refuses_what_the_compiled_code_refuses(monkeypatch):
    """The same mutants through both decoders: both read them to the same tables, or both
    refuse them naming an offset in the file (a mutant with several faults may be refused
    at a different one of them: the numpy code checks the whole group step by step, the
    compiled one batch by batch)."""
    from gmpanalysis.gotrace import kernels

    if not kernels.AVAILABLE:
        pytest.skip("numba is not installed here (the [fast] extra): only the numpy code can run")
    data = bytearray((FIXTURES / "traces" / "tiny-go1.26.trace").read_bytes())
    outcomes: dict[bool, list] = {True: [], False: []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for enabled in (True, False):
            monkeypatch.setattr(kernels, "ENABLED", enabled)
            r = random.Random(11)
            for _ in range(300):
                m = bytearray(data)
                for _ in range(r.randint(1, 3)):
                    m[r.randrange(16, len(m))] = r.randrange(256)
                try:
                    tr = read_trace(bytes(m))
                    outcomes[enabled].append(("ok", len(tr.running), len(tr.stw), int(tr.running.end_ns.sum())))
                except gmp.TraceFormatError as e:
                    at = re.search(r"offsets? (\d+)", str(e))
                    assert at is not None and int(at.group(1)) <= len(m), str(e)
                    outcomes[enabled].append(("error",))
    assert outcomes[True] == outcomes[False]
    assert ("error",) in outcomes[True] and any(o[0] == "ok" for o in outcomes[True])


@pytest.mark.parametrize("name", ["alloc-0.5cpu-gmp8", "go1.25.trace"])
def test_labels_name_the_goroutines_the_running_table_labels(name):
    """labels holds each GoLabel event with the goroutine it names: the same goroutines and
    label counts as the running rows that carry a label, read alone or with everything."""
    path = next(p for p in TRACES if name in (p.name, p.parent.name))
    full = read_trace(path)
    alone = read_trace(path, tables=("labels",))
    assert alone.labels.equals(full.labels) and len(full.labels) > 0
    labelled = full.running[full.running.label.astype(str) != ""]
    assert sorted(set(labelled.g)) == sorted(set(full.labels.g))
    assert labelled.label.astype(str).value_counts().to_dict() == full.labels.label.value_counts().to_dict()


@pytest.mark.parametrize("name", ["alloc-0.5cpu-gmp8", "cpu-0.5cpu-gmp2", "resize-0.5to2cpu-default"])
def test_window_at_generation_edges_keeps_every_row(name):
    """A thread the quota froze writes a generation's last events up to ~200 ms after the
    next one began, and what runs at t1 ends in the next generation: windows that end at a
    generation's last event, or start at the next one's first, still give the full read's
    rows, with their true ends."""
    path = next(p for p in TRACES if p.parent.name == name)
    full = read_trace(path)
    parts = list(gmp.iter_generations(path))
    checked = 0
    for k in range(len(parts) - 1):
        for t0, t1 in (
            (parts[k].meta["last_ns"] - 1000, parts[k].meta["last_ns"]),
            (parts[k + 1].meta["first_ns"], parts[k + 1].meta["first_ns"] + 1000),
        ):
            w = read_trace(path, window=(t0, t1))
            first = w.meta["first_ns"]  # rows begun before the first decoded generation start there
            for t in ("running", "stw", "gc", "assist", "sweep"):
                f, got = getattr(full, t), getattr(w, t)
                want = f[(f.end_ns >= t0) & (f.start_ns <= t1)]
                assert len(got) == len(want), (t, t0, t1)
                assert _same_rows(want[want.start_ns >= first].reset_index(drop=True), got[got.start_ns >= first]), t
                checked += len(want)
    assert checked > 0


def test_row_store_keeps_ids_through_takes_growth_and_sorts():
    """Rows keep their ids when others are taken, when the columns outgrow their
    reservation and when a chunk's rows are put in order; finish hands the columns over."""
    from gmpanalysis.gotrace.rows import RowStore

    st = RowStore({"x": np.int64, "ok": bool}, capacity=4)
    first = st.append({"x": np.arange(10), "ok": np.arange(10) % 3 == 0})  # grows past 4
    assert first == 0 and st.n == 10
    got = st.take(st.col("ok").copy())
    assert list(got["x"]) == [0, 3, 6, 9]
    assert list(st.positions([1, 2, 3, 9, 10])) == [0, 1, -1, -1, -1]
    nxt = st.append({"x": np.array([30, 20, 10]), "ok": np.zeros(3, bool)})
    assert nxt == 10
    lo = st.positions([10])[0]
    st.permute(lo, np.argsort(st.col("x")[lo:]))  # ids go with positions: 10 now holds 10
    assert st.col("x")[st.positions([10, 12])].tolist() == [10, 30]
    assert st.col("x")[st.positions([1, 8])].tolist() == [1, 8]
    out = st.finish()
    assert out["x"].tolist() == [1, 2, 4, 5, 7, 8, 10, 20, 30] and st.n == 0


def test_row_store_grows_when_the_reservation_is_refused():
    """A reservation the system refuses (here 2^44 rows of 8 bytes: all of x86-64's user
    address space) falls back to a small one that grows."""
    from gmpanalysis.gotrace.rows import RowStore

    st = RowStore({"x": np.int64}, capacity=1 << 44)
    st.append({"x": np.arange(5000)})
    assert st.finish()["x"].tolist() == list(range(5000))


@pytest.mark.parametrize("other", [[], [300]])
def test_overlaps_across_chunks_that_overlap_in_time_do_not_depend_on_the_cut(other):
    """Goroutine 7 runs 100-200 on thread 1 (generation 1) and, by thread 2's clock that is
    behind, 50-120 in generation 2: the chunks overlap in time. Read as one chunk or as two
    (with or without an unrelated later row in the first), the same interval moves: the one
    that starts later by time, to where the other ends."""
    one = {"g": [7, 7], "m": [1, 2], "start": [100, 50], "end": [200, 120], "gen": [1, 2], "seq": [3, 4]}
    extra = {"g": [9] * len(other), "m": [3] * len(other), "start": other, "end": [x + 5 for x in other]}
    first = {k: one[k][:1] + extra.get(k, [1] * len(other)) for k in one}
    second = {k: one[k][1:] for k in one}
    got = []
    for chunks in ([{k: first[k] + second[k] for k in one}], [first, second]):
        t = _clash_builder(chunks).finish(1000)["running"]
        got.append(t[t.g == 7][["start_ns", "end_ns"]].values.tolist())
    assert got[0] == got[1] == [[50, 120], [120, 200]]


@pytest.mark.parametrize("name", ["go1.22.trace", "go1.23.trace", "go1.25.trace", "tiny-go1.22.trace"])
def test_a_last_generation_never_closed_is_left_out_and_named(name):
    """A process that exits without trace.Stop (os.Exit, a crash, a cut download of
    /debug/pprof/trace) leaves whole batches and a last generation without the tables the
    runtime closes it with (stacks, strings last; a frequency batch up to Go 1.24): the file
    is each real trace cut at the end of a batch of its last generation, before its string
    table. The generations before are read, the last is left out with a warning naming it,
    and no pause or label comes out nameless (before: the cut generation was read as whole,
    its events naming strings never written, or refused whole up to Go 1.24)."""
    from gmpanalysis.gotrace import spec
    from gmpanalysis.gotrace.wire import split_generations

    data = (FIXTURES / "traces" / name).read_bytes()
    version = int(re.search(rb"go 1\.(\d+)", data[:16]).group(1))
    gens, _ = split_generations(data, version, name)
    last = gens[-1]
    first_table = next(i for i, b in enumerate(last.batches) if data[b.start] == spec.EV_STRINGS)
    ends = [b.end for b in last.batches[:first_table]]
    assert ends
    for end in ends[:: max(1, len(ends) // 4)]:
        with pytest.warns(TruncatedTraceWarning, match=rf"last generation \({last.gen}, from offset {last.start}\)"):
            tr = read_trace(data[:end])
        assert tr.meta["generations"] == len(gens) - 1 and tr.meta["truncated"] == end
        assert (tr.stw["kind"] != "").all()
        if len(tr.labels):
            assert (tr.labels["label"] != "").all()


def test_a_sweep_under_way_at_a_generation_boundary_is_one_sweep(bins):
    """A sweep under way when a generation begins is stated again there (GCSweepActive): a
    real Go 1.24 trace with a generation every 2 ms (fixtures/traces/sweeps-go1.24.trace).
    Each sweep is one row from its own begin, as x/exp/trace has it (gmp-tracepeer counts
    its sweeps), and no thread has two rows ending at one sweep end (before: 159 rows
    against Go's 158, the re-stated sweep's bytes counted twice)."""
    import json
    import subprocess

    path = FIXTURES / "traces" / "sweeps-go1.24.trace"
    tr = read_trace(path)
    r = subprocess.run([str(bins["gmp-tracepeer"]), "-tables", "sweep", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    peer = json.loads(r.stdout.splitlines()[0])
    assert len(tr.sweep) == peer["sweep"] and tr.meta["generations"] > 5
    assert not tr.sweep.duplicated(["m", "end_ns"]).any()
    parts = list(gmp.iter_generations(path))
    assert sum(len(p.sweep) for p in parts) == len(tr.sweep)
    assert sum(int(p.sweep["swept_bytes"].sum()) for p in parts) == int(tr.sweep["swept_bytes"].sum())


def test_the_trace_command_names_a_generation_never_closed(tmp_path, capsys):
    """`gmpanalysis trace` on a Go 1.22 trace cut at a batch's end before its last
    generation's string table: it says which generation was left out, and where."""
    from gmpanalysis.cli import main
    from gmpanalysis.gotrace import spec
    from gmpanalysis.gotrace.wire import split_generations

    data = (FIXTURES / "traces" / "go1.22.trace").read_bytes()
    gens, _ = split_generations(data, 22, "x")
    last = gens[-1]
    end = next(b for b in last.batches if data[b.start] == spec.EV_STRINGS).at
    (tmp_path / "cut.trace").write_bytes(data[:end])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncatedTraceWarning)
        assert main(["trace", str(tmp_path / "cut.trace")]) == 0
    out = capsys.readouterr().out
    assert f"NOT CLOSED: the last generation ({last.gen}, from offset {last.start})" in out and "TRUNCATED" not in out
