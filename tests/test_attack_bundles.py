"""Hostile bundles: every input gives a result or a GmpError naming the file, never another
exception, never a hang, never a silent wrong result.

The named cases are the ones an attack on the shipped runs found; the seeded fuzz at the end
keeps the rest held: one mutant of each kind of change and 40 random ones (250 with
GMP_FULL_ATTACK=1; benchmarks/attack_bundles.py runs thousands of the same mutants).
"""

from __future__ import annotations

import errno
import json
import os
import random
import resource
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from bundle_mutants import KINDS, RUNS, RUNS_V2, Mutant, attack, mutant
from conftest import FULL_ATTACK

import gmpanalysis as gmp
from gmpanalysis import bundle
from gmpanalysis.degrade import counter_reset
from gmpanalysis.errors import BundleError, ForeignTraceError, GmpError

RUN = next(p for p in RUNS if p.name == "cpu-0.5cpu-gmp2")
NESTED = next(p for p in RUNS if p.name == "nested-0.5cpu-pod0.5-gmp2")


def _copy(tmp_path: Path, src: Path = RUN) -> Path:
    d = tmp_path / src.name
    shutil.copytree(src, d)
    return d


def _meta(d: Path, **changes: object) -> None:
    m = json.loads((d / "meta.json").read_text())
    m.update(changes)
    (d / "meta.json").write_text(json.dumps(m))


def _csv(d: Path, name: str = "cpu_stat.csv") -> pd.DataFrame:
    return pd.read_csv(d / name, dtype={"usage_us": str, "throttled_us": str, "burst_us": str})


def _write(d: Path, df: pd.DataFrame, name: str = "cpu_stat.csv") -> None:
    df.to_csv(d / name, index=False)


def _pipeline(d: Path) -> gmp.Run:
    run = gmp.load_run(d)
    gmp.df_periods(run)
    gmp.compare_runs([run])
    gmp.df_checks(run)
    return run


def _refused(d: Path, *place: str, what: type[GmpError] = BundleError) -> str:
    """The pipeline raises ``what`` (within 10 s), and its message names the bundle's file
    and every ``place`` (a line, a key, ...)."""
    out = attack(d)
    assert out.kind == "gmp", f"{out.kind} {out.error}: {out.message}\n{out.tb}"
    assert out.error == what.__name__, out.message
    assert str(d) in out.message, out.message
    for p in place:
        assert p in out.message, out.message
    return out.message


# ---- meta.json ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, place",
    [
        (lambda b: b[:100] + b"\xc3(" + b[100:], "line 6 (byte 100): not UTF-8"),
        (lambda b: b.rstrip()[:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        (lambda b: b.rstrip()[:-1] + b', "x": ' + b"[" * 900 + b"]" * 900 + b"}", "nested more than 32 levels"),
        (lambda b: b.replace(b'"quota_us": 50000', b'"quota_us": ' + b"9" * 5000), "5000 digits"),
        (lambda b: b[: len(b) // 2], "invalid JSON"),
        (lambda b: b"\xef\xbb\xbf" + b.replace(b'"period_us": 100000', b'"period_us": 1e400'), "period_us must be"),
        (lambda b: b"[1, 2]", "a JSON object"),
    ],
    ids=["not-utf8", "deep", "deep-readable", "digits", "cut", "bom-and-inf", "array"],
)
def test_meta_text_that_is_no_meta(tmp_path, raw, place):
    d = _copy(tmp_path)
    (d / "meta.json").write_bytes(raw((d / "meta.json").read_bytes()))
    _refused(d, "meta.json", place)


@pytest.mark.parametrize(
    "key, value, place",
    [
        ("gomaxprocs_effective", {"a": 1}, "gomaxprocs_effective must be integer or null"),
        ("load", 1, "load must be object or null"),
        ("mono_end_ns", 2**64, "mono_end_ns 18446744073709551616 is outside"),
        ("mono_start_ns", 10**40, "mono_start_ns"),
        ("ncpu", 2**63, "ncpu"),
        ("name", "run\ud800", "lone surrogate"),
        ("sampler", {"interval_ns": "1ms"}, "sampler.interval_ns must be"),
        ("sampler", {"interval_ns": 0}, "sampler.interval_ns 0 is outside"),
        ("levels", [{"level": "container", "quota_us": "x"}], "levels[0].quota_us must be"),
        ("levels", [{"quota_us": 50_000}], "levels[0].level"),
        ("mono_end_ns", 1, "mono_end_ns 1 is before mono_start_ns"),
    ],
)
def test_meta_fields_of_the_wrong_type_or_size(tmp_path, key, value, place):
    d = _copy(tmp_path)
    _meta(d, **{key: value})
    _refused(d, "meta.json", place)


def test_a_byte_order_mark_is_tolerated(tmp_path):
    d = _copy(tmp_path)
    (d / "meta.json").write_bytes(b"\xef\xbb\xbf" + (d / "meta.json").read_bytes())
    assert len(gmp.df_periods(gmp.load_run(d))) > 50


@pytest.mark.parametrize("name", ["cpu_stat.csv", "limits.csv", "requests.csv", "host_stat.csv"])
def test_a_byte_order_mark_before_a_csv_header_is_tolerated(tmp_path, name):
    d = _copy(tmp_path, NESTED)
    (d / name).write_bytes(b"\xef\xbb\xbf" + (d / name).read_bytes())
    run, clean = gmp.load_run(d), gmp.load_run(NESTED)
    got = {"cpu_stat.csv": run.samples, "limits.csv": run.limits, "requests.csv": run.requests}
    want = {"cpu_stat.csv": clean.samples, "limits.csv": clean.limits, "requests.csv": clean.requests}
    got["host_stat.csv"], want["host_stat.csv"] = run.host_stat, clean.host_stat
    pd.testing.assert_frame_equal(got[name], want[name])
    assert run.notes == clean.notes


def test_a_byte_order_mark_before_a_lateness_header_is_tolerated(tmp_path):
    from gmpanalysis.sampling import read_lateness

    src = Path(__file__).resolve().parents[1] / "fixtures" / "sampling" / "inpod-lateness.csv"
    p = tmp_path / src.name
    p.write_bytes(b"\xef\xbb\xbf" + src.read_bytes())
    pd.testing.assert_frame_equal(read_lateness(p), read_lateness(src), check_like=True)


# ---- files that are no files -----------------------------------------------------------------


def _replace(p: Path, kind: str) -> None:
    if p.exists() or p.is_symlink():
        p.unlink()
    if kind == "dir":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "devzero":
        p.symlink_to("/dev/zero")
    elif kind == "loop":
        p.symlink_to(p.name + ".b")
        p.with_name(p.name + ".b").symlink_to(p.name)
    elif kind == "dangling":
        p.symlink_to(p.parent / "nowhere")


@pytest.mark.parametrize("name", ["meta.json", "cpu_stat.csv", "trace.out", "requests.csv", "limits.csv"])
@pytest.mark.parametrize(
    "kind, place",
    [
        ("dir", "is a directory"),
        ("fifo", "is a FIFO"),
        ("devzero", "is a character device"),
        ("loop", "symlink loop"),
        ("dangling", "which does not exist"),
    ],
)
def test_a_file_replaced_by_something_else(tmp_path, name, kind, place):
    d = _copy(tmp_path, NESTED)
    _replace(d / name, kind)
    t0 = time.monotonic()
    _refused(d, name, place)
    assert time.monotonic() - t0 < 5  # a FIFO is never opened for a blocking read


def test_an_unreadable_file(tmp_path, monkeypatch):
    """As root, chmod 000 changes nothing: the refusal of the kernel is simulated at the
    open (and, where it has effect, done for real with chmod)."""
    d = _copy(tmp_path)
    target = str(d / "cpu_stat.csv")
    real_open = os.open

    def refusing_open(path, flags, *a, **kw):
        if os.fspath(path) == target:
            raise PermissionError(errno.EACCES, "Permission denied", target)
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(bundle.os, "open", refusing_open)
    _refused(d, "cpu_stat.csv: permission denied")
    monkeypatch.undo()
    if os.geteuid() != 0:
        os.chmod(d / "requests.csv", 0)
        _refused(d, "requests.csv: permission denied")


def test_reads_are_bounded_by_the_size_at_open(tmp_path):
    d = _copy(tmp_path)
    data = bundle.read_bytes(d / "cpu_stat.csv")
    assert data == (d / "cpu_stat.csv").read_bytes()
    with pytest.raises(BundleError, match="more than the 10 such a file"):
        bundle.read_bytes(d / "cpu_stat.csv", limit=10)


# ---- CSV cells ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "col, value, place",
    [
        ("nr_periods", "1" * 40, "nr_periods '1111"),
        ("nr_periods", "1" * 5000, "is not a 64-bit integer"),
        ("t_ns", str(2**64), "t_ns '18446744073709551616' is not a 64-bit integer"),
        ("t_ns", str(2**63 - 1), "t_ns 9223372036854775807 is outside 1..2^62"),
        ("usage_us", "inf", "usage_us inf is outside 0..2^53"),
        ("usage_us", "1e400", "usage_us inf is outside"),
        ("nr_throttled", "-1", "nr_throttled -1 is outside"),
        ("read_ns", "0x10", "read_ns '0x10'"),
    ],
)
def test_cells_that_are_no_counters(tmp_path, col, value, place):
    d = _copy(tmp_path)
    df = _csv(d)
    df[col] = df[col].astype(object)
    df.loc[100, col] = value
    _write(d, df)
    _refused(d, "cpu_stat.csv line 102", place)


def test_a_nullable_integer_that_is_a_float(tmp_path):
    d = _copy(tmp_path, NESTED)
    text = (d / "limits.csv").read_text().splitlines()
    f = text[2].split(",")
    f[1] = "1e19"
    text[2] = ",".join(f)
    (d / "limits.csv").write_text("\n".join(text) + "\n")
    _refused(d, "limits.csv line 3", "prev_ns '1e19' is not a 64-bit integer")


# ---- time jumps follow the hole rules; the table stays the size of the data ---------------------


@pytest.mark.parametrize("jump", [10**15, 2**61, "last"])
def test_a_huge_time_jump_is_a_hole_not_a_huge_table(tmp_path, jump):
    d = _copy(tmp_path)
    _meta(d, mono_end_ns=None, complete=False, sampler={"interval_ns": 997_000})  # no recorded end
    df = _csv(d)
    if jump == "last":
        df.loc[len(df) - 1, "t_ns"] = 2**62 - 1
    else:
        df.loc[len(df) // 2 :, "t_ns"] += jump
    _write(d, df)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, hard))  # a runaway grid fails fast
    try:
        t0 = time.monotonic()
        run = gmp.load_run(d)
        per = gmp.df_periods(run)
        assert time.monotonic() - t0 < 10
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert 50 <= len(per) <= 70  # the periods around the reads, none of the hole's
    assert any("hole in the samples" in n and "not in the" in n for n in run.notes), run.notes
    # where the collection's end is recorded, samples beyond it are another run's
    _meta(d, mono_end_ns=json.loads((RUN / "meta.json").read_text())["mono_end_ns"], complete=True)
    _refused(d, "cpu_stat.csv line", "after meta.json mono_end_ns")


# ---- silent wrong results: now errors or notes --------------------------------------------------


def test_a_foreign_trace_is_refused(tmp_path):
    d = _copy(tmp_path)
    shutil.copy(NESTED / "trace.out", d / "trace.out")  # another run, hours apart
    _refused(d, "trace.out: its clock spans", "another run", what=ForeignTraceError)


def test_a_trace_of_another_go_version_is_refused(tmp_path):
    d = _copy(tmp_path)
    _meta(d, go_version="go1.22.5")
    _refused(d, "trace.out: written in the go 1.26 trace format", "go1.22.5", what=ForeignTraceError)
    _meta(d, go_version="go1.27.1")  # writes the 1.26 format
    _pipeline(d)


def test_duplicate_requests_count_once_and_are_noted(tmp_path):
    d = _copy(tmp_path)
    clean = gmp.compare_runs([gmp.load_run(d)])
    raw = (d / "requests.csv").read_bytes()
    (d / "requests.csv").write_bytes(raw + raw.split(b"\n", 1)[1])  # the rows appended again
    run = gmp.load_run(d)
    again = gmp.compare_runs([run])
    assert again["throughput_rps"].iloc[0] == clean["throughput_rps"].iloc[0]
    assert gmp.df_periods(run)["requests"].sum() == gmp.df_periods(gmp.load_run(RUN))["requests"].sum()
    assert any("duplicate row(s)" in n and "requests.csv" in n for n in run.notes)


def test_a_request_that_ends_before_it_was_scheduled(tmp_path):
    d = _copy(tmp_path)
    df = pd.read_csv(d / "requests.csv")
    df.loc[10, "sched_ns"] = df.loc[10, "end_ns"] + 1
    _write(d, df, "requests.csv")
    _refused(d, "requests.csv line 12", "end_ns before sched_ns")


def test_nr_throttled_never_runs_ahead_of_nr_periods(tmp_path):
    d = _copy(tmp_path)
    df = _csv(d)
    df.loc[3000:, "nr_throttled"] += 5
    _write(d, df)
    _refused(d, "cpu_stat.csv line 3002", "nr_throttled", "run ahead of nr_periods")


def test_a_counter_falling_without_usage_falling_is_noted(tmp_path):
    d = _copy(tmp_path)
    df = _csv(d)
    df.loc[3000:, "nr_periods"] -= 3
    _write(d, df)
    run = _pipeline(d)
    assert any("cpu_stat.csv line 3002: nr_periods fell" in n and "usage_us did not fall" in n for n in run.notes)
    # a real restart (every counter, usage included, starts again) is no news
    d2 = _copy(tmp_path / "reset")
    s = pd.read_csv(d2 / "cpu_stat.csv")
    _write(d2, counter_reset(s, int(s["t_ns"].iloc[len(s) // 2])))
    run = gmp.load_run(d2)
    assert not any("fell" in n for n in run.notes)
    assert gmp.df_periods(run)["segment"].nunique() == 2


@pytest.mark.parametrize("jump", [2, 3, 5, 40])
def test_nr_periods_rising_faster_than_periods_end_names_the_line(tmp_path, jump):
    """One damaged read: nr_periods +jump between reads 1 ms apart. The timer counts one
    period per expiry it passed, so the file is refused at that line (a small jump gave a
    period of nr_periods 4 unsaid, a large one blamed meta.json's period_us)."""
    d = _copy(tmp_path)
    df = pd.read_csv(d / "cpu_stat.csv")
    rise = int(np.flatnonzero(np.diff(df["nr_periods"].to_numpy())[3000:] > 0)[0]) + 3000
    at = rise + 6  # five reads (5 ms) after a real rise
    df.loc[at:, "nr_periods"] += jump
    _write(d, df)
    said = _refused(d, f"cpu_stat.csv line {at + 2}", f"nr_periods rose by {jump} since line {at + 1}", "fix or remove")
    assert "meta.json: the CFS period is" not in said


def test_a_late_timer_crediting_several_periods_at_once_is_no_damage(tmp_path):
    """A timer that fires late credits every period it passed at once: the reads between
    show no rise, then one of several. That is the kernel's way, not damage."""
    d = _copy(tmp_path)
    df = pd.read_csv(d / "cpu_stat.csv")
    t, per = df["t_ns"], df["nr_periods"].to_numpy().copy()
    i0 = int(np.flatnonzero(np.diff(per) > 0)[20]) + 1  # a rise; hold the count for 350 ms after it
    i1 = int(np.searchsorted(t.to_numpy(), int(t[i0]) + 350_000_000))
    per[i0:i1] = per[i0]
    df["nr_periods"] = per
    _write(d, df)
    assert len(gmp.df_periods(gmp.load_run(d))) > 50


def test_a_slow_read_may_see_the_periods_that_end_while_it_reads():
    """t_ns is a read's middle; a slow read (v2 flushes the CPUs' stats before it prints
    nr_periods) may see the counter near its end: 2 ms periods, reads at 1.9 and 2.1 ms,
    then one from 2.2 to 12.2 ms stamped 7.2 ms that sees +5 is the kernel's way; +7 is not."""
    from gmpanalysis.counters import _periods_run_ahead

    ms = 1_000_000
    t = (np.array([1.9, 2.1, 7.2]) * ms).astype(np.int64)
    read = (np.array([0.02, 0.02, 10.0]) * ms).astype(np.int64)
    line = np.array([2, 3, 4])
    _periods_run_ahead(t, read, np.array([1, 2, 7]), line, "cpu_stat.csv", 2000)
    with pytest.raises(gmp.BundleError, match="cpu_stat.csv line 4: nr_periods rose by 7"):
        _periods_run_ahead(t, read, np.array([1, 2, 9]), line, "cpu_stat.csv", 2000)


def test_a_restart_the_collector_saw_is_no_damage_whatever_the_counters_did():
    """A container that ran 0.3 s unthrottled is recreated and first read 2 s later, its
    nr_periods already past the old one's: only usage fell. Where meta.json's restarts say
    so, that is no damage (no note); where nothing says so, a note names the line."""
    from gmpanalysis.counters import check_counters

    ms = 1_000_000
    df = pd.DataFrame(
        {"t_ns": np.array([100, 200, 300, 2500, 2600]) * ms, "read_ns": 20_000,
         "usage_us": [50_000.0, 90_000.0, 120_000.0, 60_000.0, 70_000.0], "nr_periods": [1, 2, 3, 21, 22],
         "nr_throttled": 0, "throttled_us": 0.0, "nr_bursts": 0, "burst_us": 0.0}
    )  # fmt: skip
    assert check_counters(df, "cpu_stat.csv", [1_000 * ms], "container", 100_000) == []
    unsaid = check_counters(df, "cpu_stat.csv", (), "container", 100_000)
    assert len(unsaid) == 1 and "line 5: usage_us fell" in unsaid[0] and "nothing says this is a restart" in unsaid[0]


def test_usage_falling_alone_is_noted_as_no_restart(tmp_path):
    """usage_us 1 µs below the read before while nr_periods, nr_throttled and throttled_us
    go on: no recreated cgroup restarts one counter alone, so the note names the line, as
    for the other counters; the table still conserves every counter."""
    d = _copy(tmp_path)
    df = pd.read_csv(d / "cpu_stat.csv")
    i = int(df.index[(df.index > 2500) & (df["usage_us"].diff() > 100)][0])
    df.loc[i, "usage_us"] = df.loc[i - 1, "usage_us"] - 1
    _write(d, df)
    run = _pipeline(d)
    said = [n for n in run.notes if f"cpu_stat.csv line {i + 2}: usage_us fell" in n]
    assert said and "nr_periods, nr_throttled and throttled_us did not" in said[0] and "Check the file" in said[0]
    assert not any("(a recreated cgroup)" in n for n in run.notes), run.notes
    c = gmp.df_conservation(gmp.df_periods(run))
    assert ((c["rows"] + c["groups"] + c["outside"] - c["delta"]).abs() < 1e-6).all()


@pytest.mark.parametrize("period_us", [1000, 50_000, 80_000, 99_000, 200_000, 1_000_000])
def test_a_recorded_period_the_samples_contradict(tmp_path, period_us):
    d = _copy(tmp_path)
    _meta(d, period_us=period_us)
    _refused(d, "meta.json: the CFS period is", "set period_us", "about 99.7 ms")


def test_a_slightly_wrong_period_is_a_note_in_the_report(tmp_path):
    d = _copy(tmp_path)
    _meta(d, period_us=99_900)
    run = gmp.load_run(d)
    gmp.df_periods(run)
    note = next(n for n in run.notes if "drift" in n)
    assert "99900 µs" in note and "about 99994 µs" in note
    out = gmp.to_report([run], tmp_path / "r.html")
    assert "drift" in out.read_text()


def test_the_shipped_runs_raise_no_doubt(tmp_path):
    for p in RUNS:
        run = gmp.load_run(p)
        gmp.df_periods(run)
        assert run.notes == [], (p.name, run.notes)


# ---- the fuzz --------------------------------------------------------------------------------


N_RANDOM = 250 if FULL_ATTACK else 40


def _mutants(rng: random.Random, bases: list[Path]) -> Iterator[Mutant]:
    """N_RANDOM random mutants (one to three changes each), then one of each kind of change."""
    for _ in range(N_RANDOM):
        yield mutant(rng, bases)
    for kind in KINDS:
        yield mutant(rng, bases, kind=kind)


def _attack_all(mutants: Iterable[Mutant], tmp_path: Path) -> tuple[dict[str, int], list[str], set[str]]:
    """Each mutant written and attacked in turn (one on disk at a time): the outcomes by kind,
    each failure (an exception other than a GmpError, a hang, a message not naming the file)
    with its changes, and the kinds of change made."""
    outcomes: dict[str, int] = {}
    failures = []
    made: set[str] = set()
    for i, m in enumerate(mutants):
        made |= m.kinds
        d = m.write(tmp_path / f"m{i}")
        out = attack(d)
        outcomes[out.kind] = outcomes.get(out.kind, 0) + 1
        if out.kind in ("bad", "hang") or not out.names_file:
            failures.append(f"{m.base.name}: {'; '.join(m.what)}: {out.kind} {out.error}: {out.message}\n{out.tb}")
        shutil.rmtree(d)
    return outcomes, failures, made


def test_mutants_of_the_shipped_runs(tmp_path):
    """Seeded mutants of the shipped runs (the big trace of the alloc run left out, for
    speed), 40 random ones (250 with GMP_FULL_ATTACK=1) and one of each kind of change: each
    gives a result or a GmpError naming the file, within 10 s."""
    rng = random.Random(14)
    bases = [p for p in RUNS if not p.name.startswith("alloc")]
    t0 = time.monotonic()
    outcomes, failures, made = _attack_all(_mutants(rng, bases), tmp_path)
    assert not failures, "\n".join(failures)
    assert made == set(KINDS), f"never made: {sorted(set(KINDS) - made)}"
    n = N_RANDOM + len(KINDS)
    assert outcomes.get("ok", 0) > n // 6 and outcomes.get("gmp", 0) > n * 2 // 5, outcomes  # both exercised
    assert time.monotonic() - t0 < 60


def test_mutants_of_the_v2_runs(tmp_path):
    """Seeded mutants of the cgroup v2 runs (v2-only columns, two levels in one cpu_stat.csv,
    limits.csv per level), 30 random ones: each gives a result or a GmpError naming the file."""
    rng = random.Random(21)
    outcomes, failures, _ = _attack_all((mutant(rng, RUNS_V2) for _ in range(30)), tmp_path)
    assert not failures, "\n".join(failures)
    assert outcomes.get("ok", 0) >= 5 and outcomes.get("gmp", 0) >= 5, outcomes
