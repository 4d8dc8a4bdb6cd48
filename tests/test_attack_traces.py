"""The trace attack suite: hostile and damaged Go execution traces give a TraceFormatError
naming the file and the offset, or tables that hold together, never another exception or a
hang. Seeded structure-aware mutants here (tests/trace_mutants.py): 600, each kind of
mutation among them, or 3,000 with GMP_FULL_ATTACK=1; benchmarks/attack_traces.py runs
25 000 and more."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES, FULL_ATTACK

import gmpanalysis as gmp
from gmpanalysis.errors import ClockWarning
from gmpanalysis.gotrace import read_trace, spec

sys.path.insert(0, str(Path(__file__).parent))
import trace_mutants as tm  # noqa: E402

TINY = [FIXTURES / "traces" / n for n in ("tiny-go1.22.trace", "tiny-go1.26.trace")]
SMALL_RUNS = sorted((FIXTURES / "runs").glob("cpu-*/trace.out"))
N_MUTANTS = 3000 if FULL_ATTACK else 600


@pytest.fixture(scope="module")
def models() -> list[tm.Model]:
    return [tm.parse(p.read_bytes()) for p in TINY + SMALL_RUNS]


def test_mutants_give_gmp_errors_or_sound_tables(models):
    """Each mutant under a budget of 10 CPU seconds (the bound for one small input)."""
    bad, outcomes, kinds = [], {}, set()
    for k, outcome, detail, what, kind in tm.run(models, seed=14, n=N_MUTANTS, budget_s=10.0):
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        kinds |= kind
        if outcome not in ("parsed", "truncated", "error"):
            bad.append(f"mutant {k} [{what}]: {outcome}: {detail[:200]}")
    assert not bad, f"{len(bad)} of {N_MUTANTS} (redo one: benchmarks/attack_traces.py 1 14 --one K):\n" + "\n".join(
        bad[:20]
    )
    # the mutants reach every outcome, so the suite attacks the decoder and not only the framing
    assert outcomes.get("parsed", 0) > N_MUTANTS // 10 and outcomes.get("error", 0) > N_MUTANTS // 10, outcomes
    assert outcomes.get("truncated", 0) > 0, outcomes
    # and every kind of mutation is among them
    assert kinds == set(tm.KINDS), f"never made: {sorted(set(tm.KINDS) - kinds)}"


def test_the_mutator_writes_the_seeds_back_unchanged():
    for p in TINY + SMALL_RUNS:
        data = p.read_bytes()
        assert tm.write(tm.parse(data)) == data, p


# --- the cases found by the first attack, one by one --------------------------------------


def _with(data: bytes, edit) -> bytes:  # noqa: ANN001
    m = tm.parse(data)
    edit(m)
    return tm.write(m)


def _first(m: tm.Model, kind: str) -> tuple[tm.Batch, int, int]:
    """The first batch with a field of this kind, and the field's place."""
    for b in tm.batches(m):
        for s, e, k in tm.fields(b):
            if k == kind:
                return b, s, e
    raise AssertionError(kind)


TABLE_BATCHES = (2, 4, 6, 8, 0x32)  # stacks, strings, CPU samples, frequency, sync


def _event_batch(m: tm.Model, i: int = 0) -> tm.Batch:
    return [b for b in tm.batches(m) if b.exp is None and b.payload and b.payload[0] not in TABLE_BATCHES][i]


def _set(kind: str, value: int | bytes):  # noqa: ANN202
    def edit(m: tm.Model) -> None:
        b, s, e = _first(m, kind)
        b.payload[s:e] = value if isinstance(value, bytes) else tm.enc(value)

    return edit


@pytest.mark.parametrize("freq", [0, 1, 2, 99_999, 1_000_000_001, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1])
@pytest.mark.parametrize("name", ["tiny-go1.22.trace", "tiny-go1.26.trace"])
def test_impossible_clock_frequency_is_refused_where_it_is_read(tmp_path, name, freq):
    data = _with((FIXTURES / "traces" / name).read_bytes(), _set("freq", freq))
    path = tmp_path / "bad.trace"
    path.write_bytes(data)
    with pytest.raises(
        gmp.TraceFormatError, match=rf"bad\.trace offset \d+ \(generation 1\): trace clock frequency {freq}"
    ):
        read_trace(path)


def test_another_plausible_frequency_is_read_with_a_clock_warning():
    """Windows traces tick at cputicks/256: times scale by the frequency."""
    data = (FIXTURES / "traces" / "tiny-go1.26.trace").read_bytes()
    m = tm.parse(data)
    for b in tm.batches(m):  # every generation: one process has one clock
        for s, e, k in tm.fields(b):
            if k == "freq":
                b.payload[s:e] = tm.enc(2 * 15_625_000)
    with pytest.warns(ClockWarning, match="31250000 ticks/s"):
        tr = read_trace(tm.write(m))
    ref = read_trace(data)
    assert tr.meta["frequency"] == 31_250_000
    assert np.array_equal(tr.running.start_ns.to_numpy() * 2, ref.running.start_ns.to_numpy())


def test_overlong_varints_name_the_file_and_the_offset(tmp_path):
    data = (FIXTURES / "traces" / "tiny-go1.26.trace").read_bytes()
    path = tmp_path / "t.trace"
    for raw, what in ((b"\x80" * 11 + b"\x01", "longer than 10 bytes"), (b"\xff" * 9 + b"\x02", "overflows 64 bits")):
        for kind in ("dt", "str_len", "freq"):
            path.write_bytes(_with(data, _set(kind, raw)))
            with pytest.raises(gmp.TraceFormatError) as e:
                read_trace(path)
            msg = str(e.value)
            assert str(path) in msg and tm.PLACE.search(msg), msg
            if kind == "dt":
                assert what in msg, msg


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda m: setattr(_event_batch(m, 1), "ts", 1 << 63), id="batch-start-2^63"),
        pytest.param(lambda m: setattr(_event_batch(m, 1), "ts", (1 << 62) // 64 + 1), id="batch-start-past-2^62ns"),
        pytest.param(_set("dt", (1 << 64) - 1), id="dt-2^64-1"),
        pytest.param(_set("dt", (1 << 62) // 64 + 1), id="dt-past-2^62ns"),
        pytest.param(_set("snap_mono", 1 << 63), id="clock-snapshot-mono"),
    ],
)
def test_times_past_int64_are_refused(edit):
    data = _with((FIXTURES / "traces" / "tiny-go1.26.trace").read_bytes(), edit)
    with pytest.raises(gmp.TraceFormatError, match=r"<bytes> offset \d+.*(beyond any CLOCK_MONOTONIC|past)"):
        read_trace(data)


def test_many_steps_that_add_up_past_int64_are_refused():
    """Each step is small enough alone; their sum is not (int64 wraps if nothing checks)."""
    step = (1 << 62) // 64 // 3

    def edit(m: tm.Model) -> None:
        b = next(b for b in tm.batches(m) if sum(k == "dt" for *_, k in tm.fields(b)) >= 8)
        for s, e, k in reversed(tm.fields(b)):
            if k == "dt":
                b.payload[s:e] = tm.enc(step)

    data = _with((FIXTURES / "traces" / "tiny-go1.26.trace").read_bytes(), edit)
    with pytest.raises(gmp.TraceFormatError, match=r"<bytes> offset \d+: event time past"):
        read_trace(data)


def test_a_thread_clock_going_back_is_held_and_noted():
    """A batch that starts before the end of the previous batch of its thread (a spliced or
    damaged trace): its events are held at the thread's last time, a ClockWarning says where,
    and no interval ends before it starts."""
    data = (FIXTURES / "runs" / "cpu-0.5cpu-gmp2" / "trace.out").read_bytes()
    m = tm.parse(data)
    seen: dict[int, tm.Batch] = {}
    for b in tm.batches(m):
        if not b.payload or b.payload[0] in TABLE_BATCHES:
            continue
        if b.m in seen:
            b.ts = seen[b.m].ts  # back to the start of the thread's previous batch
            break
        seen[b.m] = b
    with pytest.warns(ClockWarning, match=r"clock goes back at 1 batch start\(s\), first at offset \d+"):
        tr = read_trace(tm.write(m))
    assert tr.meta["clock_steps_back"] == 1
    for t in tm.INTERVAL_TABLES:
        df = getattr(tr, t)
        assert (df.end_ns >= df.start_ns).all(), t
    assert tm.invariants(tr) == []
    with pytest.warns(ClockWarning, match=r"clock goes back at 1 batch start"):  # read a generation at a time too
        list(gmp.iter_generations(tm.write(m)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_trace(data).meta["clock_steps_back"] == 0


def test_generations_out_of_order_or_repeated_are_refused():
    data = (FIXTURES / "traces" / "tiny-go1.22.trace").read_bytes()
    gens = [b.gen for b in tm.batches(tm.parse(data))]
    assert sorted(set(gens)) == [1, 2]

    def swap(m: tm.Model) -> None:
        for b in tm.batches(m):
            b.gen = 3 - b.gen

    with pytest.raises(gmp.TraceFormatError, match=r"offset \d+: generation 1 after generation 2"):
        read_trace(_with(data, swap))
    with pytest.raises(gmp.TraceFormatError, match=r"offset \d+: generation \d+ does not exist"):
        read_trace(_with(data, lambda m: setattr(tm.batches(m)[0], "gen", 1 << 40)))


def test_gomaxprocs_zero_is_refused():
    data = (FIXTURES / "runs" / "cpu-0.5cpu-gmp2" / "trace.out").read_bytes()

    def edit(m: tm.Model) -> None:
        for b in tm.batches(m):
            for s, _, k in tm.fields(b):
                if k == "type" and b.payload[s] == 9:  # ProcsChange: dt, procs, stack
                    fs = [f for f in tm.fields(b) if f[0] > s]
                    ps, pe, _ = fs[1]
                    b.payload[ps:pe] = tm.enc(0)
                    return
        raise AssertionError("no ProcsChange")

    with pytest.raises(gmp.TraceFormatError, match=r"<bytes> offset \d+: GOMAXPROCS 0"):
        read_trace(_with(data, edit))


# --- files that are not files ---------------------------------------------------------------


def _quickly(fn) -> BaseException | None:  # noqa: ANN001
    """Run fn in a thread; fail if it does not return within 5 s (a blocking open hangs)."""
    out: list[BaseException | None] = []

    def go() -> None:
        try:
            fn()
            out.append(None)
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out.append(e)

    t = threading.Thread(target=go, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(5)
    assert out, f"still running after {time.monotonic() - t0:.0f} s"
    return out[0]


def test_a_fifo_a_device_and_a_symlink_loop_are_refused_at_once(tmp_path):
    fifo = tmp_path / "trace.out"
    os.mkfifo(fifo)
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop")
    for path, what in ((fifo, "not a regular file"), (Path("/dev/zero"), "not a regular file"), (loop, "cannot be")):
        e = _quickly(lambda p=path: read_trace(p))
        assert isinstance(e, gmp.TraceFormatError), e
        assert str(path) in str(e) and what in str(e), e


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_named(tmp_path):
    p = tmp_path / "trace.out"
    p.write_bytes((FIXTURES / "traces" / "tiny-go1.26.trace").read_bytes())
    p.chmod(0)
    with pytest.raises(gmp.TraceFormatError, match="cannot be read .* permissions"):
        read_trace(p)


# --- cases the compiled decoder once got wrong --------------------------------------------


def _synthetic(events: bytes, strings: bytes = b"", version: int = 22) -> bytes:
    """A one-generation trace of the given version: a frequency batch, ``events`` as one
    event batch of thread 1, and the string batch that closes a generation (``strings`` in
    it, or none)."""
    from trace_mutants import Batch, Model, enc, write

    items = [Batch(None, 1, (1 << 64) - 1, 100, bytearray(b"\x08" + enc(15_625_000)))]
    items.append(Batch(None, 1, 7, 100, bytearray(events)))
    items.append(Batch(None, 1, (1 << 64) - 1, 100, bytearray(b"\x04" + strings)))
    return write(Model(bytearray(b"go 1.%d trace" % version).ljust(16, b"\0"), items, version))


def _both_refuse(data: bytes, monkeypatch: pytest.MonkeyPatch, match: str) -> None:
    from gmpanalysis.gotrace import kernels

    for enabled in {True, False} if kernels.AVAILABLE else {False}:
        monkeypatch.setattr(kernels, "ENABLED", enabled)
        with pytest.raises(gmp.TraceFormatError, match=match):
            read_trace(data)


def test_a_lone_type_byte_after_two_byte_events_is_refused_without_a_crash(monkeypatch):
    """85 ProcStops (type, dt: 2 bytes each) and a lone type byte: an odd-sized batch. The
    compiled decoder once wrote one slot past its buffers here and the interpreter aborted
    (free(): invalid next size); the read runs in a child so an abort fails the test."""
    data = _synthetic(b"\x0b\x00" * 85 + b"\x0b")
    code = (
        "import sys, gmpanalysis as g\n"
        "try:\n    g.read_trace(sys.stdin.buffer.read())\nexcept g.TraceFormatError as e:\n    print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=120)
    assert r.returncode == 0 and b"runs past the end of its batch" in r.stdout, (r.returncode, r.stderr[-300:])
    _both_refuse(data, monkeypatch, "runs past the end of its batch")


def test_a_varint_running_into_the_next_batch_is_refused(monkeypatch):
    """The last byte of a batch with its continuation bit set: the varint would run on into
    the next batch's header (the numpy walk once read it from there and accepted the trace)."""
    models = tm.parse((FIXTURES / "traces" / "tiny-go1.26.trace").read_bytes())
    side = (spec.EV_STRINGS, spec.EV_STACKS, spec.EV_CPU_SAMPLES, spec.EV_SYNC, spec.EV_FREQUENCY)
    events = [i for i, b in enumerate(models.items) if b is not tm.EOG and b.exp is None and b.payload[0] not in side]
    assert len(events) >= 3
    for i in events[:3]:
        m = copy.deepcopy(models)
        m.items[i].payload[-1] |= 0x80
        _both_refuse(tm.write(m), monkeypatch, "runs past the end of its batch|varint")


@pytest.mark.parametrize(
    ("arg", "match"), [(b"\x80" * 10 + b"\x01", "longer than 10 bytes"), (b"\x80" * 9 + b"\x02", "overflows 64 bits")]
)
def test_an_oversized_varint_is_refused_even_in_an_argument_nobody_reads(monkeypatch, arg, match):
    """GoBlock's stack argument is not used by any table, yet Go's reader refuses a varint
    past 10 bytes or 64 bits there, and so do both decoders."""
    from trace_mutants import enc

    events = b"\x0a" + enc(1) + enc(0) + enc(0)  # ProcStart p=0
    events += b"\x10" + enc(1) + enc(5) + enc(1)  # GoStart g5
    events += b"\x14" + enc(1) + enc(2) + arg  # GoBlock reason, stack
    _both_refuse(_synthetic(events), monkeypatch, match)


def test_tens_of_thousands_of_label_names_are_read():
    """33,000 distinct GoLabel names (the label ids once overflowed int16)."""
    from trace_mutants import Batch, Model, enc, write

    n = 33_000
    strings = b"".join(b"\x05" + enc(i + 1) + enc(len(b"L%d" % i)) + b"L%d" % i for i in range(n))
    items = [
        Batch(None, 1, (1 << 64) - 1, 100, bytearray(b"\x08" + enc(15_625_000))),
        Batch(None, 1, (1 << 64) - 1, 100, bytearray(b"\x04" + strings)),
    ]
    events = bytearray(b"\x0a" + enc(1) + enc(0) + enc(0))  # ProcStart p=0
    for i in range(n):  # GoStart g, then GoLabel naming it; batches stay under 64 KiB
        pair = b"\x10" + enc(1) + enc(i + 10) + enc(1) + b"\x27" + enc(1) + enc(i + 1)
        if len(events) + len(pair) > 60_000:
            items.append(Batch(None, 1, 7, 100 + len(items) * 100_000, events))  # after the last
            events = bytearray()
        events += pair
    items.append(Batch(None, 1, 7, 100 + len(items) * 100_000, events))
    tr = read_trace(write(Model(bytearray(b"go 1.22 trace").ljust(16, b"\0"), items, 22)))
    assert len(tr.labels) == n and tr.running.label.nunique() == n


def test_many_rows_open_across_many_generations():
    """5,000 goroutines started, a third never stopped, then 40 empty generations: those stay
    open to the end. iter_generations keeps them under lasting ids instead of renumbering
    every one at every generation (renumbering took 0.1 s per generation per 100,000 open
    rows), and yields each row once, the same rows as read_trace."""
    from trace_mutants import Batch, Model, enc, write

    none = (1 << 64) - 1
    items = [Batch(None, 1, none, 1000, bytearray(b"\x08" + enc(15_625_000)))]
    events = bytearray()
    for i in range(5000):
        start = bytes([spec.EV_GOSTART]) + enc(1) + enc(i + 10) + enc(1)
        if i % 3 == 0:  # a third start on threads of their own and never stop
            items.append(Batch(None, 1, 100 + i, 1000, bytearray(start)))
        else:  # the rest run and stop on thread 7: a part with rows done and rows open
            events += start + bytes([spec.EV_GOSTOP]) + enc(1) + enc(1) + enc(0)
    items.append(Batch(None, 1, 7, 1000, events))
    items.append(Batch(None, 1, none, 1000, bytearray(b"\x04")))  # the string batch closing it
    for g in range(2, 42):
        items.append(Batch(None, g, none, 10**7 * g, bytearray(b"\x08" + enc(15_625_000))))
        items.append(Batch(None, g, none, 10**7 * g, bytearray(b"\x04")))
    data = write(Model(bytearray(b"go 1.22 trace").ljust(16, b"\0"), items, 22))
    whole = read_trace(data)
    parts = list(gmp.iter_generations(data))
    got = pd.concat([p.running for p in parts], ignore_index=True)
    key = ["start_ns", "m", "g"]
    a = whole.running.sort_values(key, ignore_index=True)
    b = got.sort_values(key, ignore_index=True)
    assert len(a) == 5000 and a[["g", "start_ns", "end_ns", "open"]].equals(b[["g", "start_ns", "end_ns", "open"]])
