"""A trace read in parts by several processes gives the tables of a one-core read, on every
trace: the real ones (parts cut at every generation), hostile mutants (the same tables, or
the same error and warnings), and when a part starts from a wrong guess of its threads'
states or its process dies."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES, REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from gmpanalysis.cgroup import process_cpu_limit
from gmpanalysis.errors import UsageError
from gmpanalysis.gotrace import kernels, parallel, parse_trace, partprocs, read_trace
from gmpanalysis.gotrace import reader as R
from gmpanalysis.gotrace import tables as T
from gmpanalysis.gotrace.decode import new_info
from gmpanalysis.gotrace.edge import Edge, SeenIds
from gmpanalysis.gotrace.part import INFO_KEYS, export

sys.path.insert(0, str(Path(__file__).parent))
import trace_mutants as tm  # noqa: E402

pytestmark = pytest.mark.skipif(not parallel.available(), reason="parts are read by forked processes: Linux only")

SHARED = REPO.parent / "shared" / "data" / "16cpu-v2"
TRACES = sorted((FIXTURES / "traces").glob("*.trace")) + sorted((FIXTURES / "runs").glob("*/trace.out"))
SHARED_TRACES = sorted(SHARED.glob("*/trace.out"))


class Joins(list):
    planned: list[int]


@pytest.fixture
def small_parts(monkeypatch):
    """Every generation a chunk of its own, and parts of any size: the joins fall between
    generations everywhere a small trace has them. Gives the outcome of each join and the
    number of parts each read was planned in."""
    monkeypatch.setattr(R, "CHUNK_BYTES", 1)
    monkeypatch.setattr(parallel, "PART_MIN_BYTES", 1)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1)
    joins, planned = Joins(), []
    real_join, real_plan = parallel.join, parallel.plan

    def join(b, info, got, *rest):
        joins.append(real_join(b, info, got, *rest))
        return joins[-1]

    def plan(chunks, workers, **kw):
        parts = real_plan(chunks, workers, **kw)
        planned.append(len(parts))
        return parts

    monkeypatch.setattr(parallel, "join", join)
    monkeypatch.setattr(parallel, "plan", plan)
    joins.planned = planned
    return joins


def outcome(read, *args, **kw):
    """The tables (or the error) and the warnings of one read."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = read(*args, **kw)
        except Exception as e:  # noqa: BLE001 (the same error is what is compared)
            got = (type(e).__name__, str(e))
    return got, [(type(w.message).__name__, str(w.message)) for w in caught]


def assert_same(a, b, what=""):
    (ta, wa), (tb, wb) = a, b
    assert wa == wb, what
    if isinstance(ta, tuple) or isinstance(tb, tuple):
        assert ta == tb, what
        return
    for name in R.TABLES:
        pd.testing.assert_frame_equal(getattr(ta, name), getattr(tb, name), check_exact=True, obj=f"{what} {name}")
    assert ta.meta == tb.meta, what


@pytest.mark.parametrize("path", TRACES + SHARED_TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_parts_give_the_tables_of_one_core(path, small_parts):
    one = outcome(read_trace, path, workers=1)
    for workers in (2, 3, 7):
        assert_same(one, outcome(read_trace, path, workers=workers), f"{path} in {workers} parts")
    assert small_parts.planned == [min(one[0].meta["generations"], w) for w in (2, 3, 7)] or (
        one[0].meta["generations"] > 3 and min(small_parts.planned) > 1
    )
    assert len(small_parts) == sum(n - 1 for n in small_parts.planned)  # a join per part but the first
    assert all(small_parts)


@pytest.mark.parametrize("tables", [("stw", "gc", "gomaxprocs"), ("running",), ("assist", "labels"), ("heap",)])
def test_parts_of_some_tables_and_without_the_compiled_code(tables, small_parts, monkeypatch):
    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"
    for compiled in (True, False):
        monkeypatch.setattr(kernels, "ENABLED", compiled)
        one = outcome(read_trace, path, workers=1, tables=tables)
        assert_same(one, outcome(read_trace, path, workers=4, tables=tables), f"{tables} compiled={compiled}")
    assert len(small_parts) == sum(n - 1 for n in small_parts.planned) > 0 and all(small_parts)


def test_the_tables_do_not_depend_on_the_guess_of_the_threads_states(small_parts, monkeypatch):
    """Each part guesses its threads' states from the generation before it; a part whose
    guess was wrong for a thread it uses is read again here from the true states. A guess
    is wrong when it differs from the true state for any thread the part touched; here
    every part is taken as wrongly guessed and read again."""
    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"
    one = outcome(read_trace, path, workers=1)
    b = T.Builder(frozenset({"running"}))
    b.m_state = {1: (5, 1, 0), 2: (-1, 0, -1)}
    assert not parallel._guess_missed(b, {"guess": {1: (5, 1, 0), 2: parallel.NO_STATE}, "edge": Edge()})
    assert parallel._guess_missed(b, {"guess": {1: (5, 1, 0), 2: (7, 1, 3)}, "edge": Edge()})
    assert parallel._guess_missed(b, {"guess": {3: (7, 1, 3)}, "edge": Edge()})  # a thread the parts before never saw
    missed = []
    monkeypatch.setattr(parallel, "_guess_missed", lambda b, got: missed.append(True) or True)
    assert_same(one, outcome(read_trace, path, workers=4))
    assert len(missed) == small_parts.planned[-1] - 1 > 0  # every part read again
    assert all(small_parts)


def mapped_rss(path: Path) -> int:
    """This process's resident bytes of its mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's first line
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(head[1]) * 1024
    return total


def huge_tmpfs(path: Path) -> bool:
    """Whether ``path`` lies on a tmpfs that keeps files in huge pages (2 MiB folios)."""
    best, huge = "", False
    for line in Path("/proc/mounts").read_text().splitlines():
        _, where, fstype, opts = line.split()[:4]
        if str(path).startswith(where) and len(where) > len(best):
            huge_pages = any(o in opts for o in ("huge=always", "huge=within", "huge=advise"))
            best, huge = where, fstype == "tmpfs" and huge_pages
    return huge


def test_a_read_in_parts_keeps_only_its_own_part_of_the_file_mapped(small_parts, tmp_path):
    """Listing the generations touches every page of the file; the parts after the first
    are read by other processes, so this one must not keep their pages resident meanwhile
    (on an 837 MB trace they were half a file of the peak)."""
    if huge_tmpfs(tmp_path):
        pytest.skip(f"{tmp_path} is on a tmpfs of huge pages: a file's pages are mapped 2 MiB at a time there")
    path = tmp_path / "t.trace"
    data = (FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out").read_bytes()
    with open(path, "wb") as f:  # written 64 KiB at a time: the page cache holds it in folios no larger
        for at in range(0, len(data), 1 << 16):
            f.write(data[at : at + (1 << 16)])
    seen = []
    read_trace(path, workers=3, progress=lambda offset: seen.append((offset, mapped_rss(path))) if not seen else None)
    ((offset, rss),) = seen
    assert small_parts.planned == [3]
    # a fault maps the folio it falls in and up to 64 KiB around it (fault-around)
    assert rss <= offset + (128 << 10) < len(data), f"{rss} bytes resident after the first {offset} were read"


def test_a_caller_s_own_mapping_read_in_parts_is_left_as_it_was(small_parts):
    """Only the reader's own read-only mapping of a file has its pages dropped: dropped from
    a private mapping (anonymous, or a file mapped copy-on-write) they would read back as
    zeros, the caller's data and the trace gone."""
    data = (FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out").read_bytes()
    mm = mmap.mmap(-1, len(data), flags=mmap.MAP_PRIVATE)
    mm[:] = data
    assert_same(outcome(parse_trace, data, workers=1), outcome(parse_trace, mm, workers=3))
    assert small_parts.planned == [3] and mm[:] == data


@pytest.fixture
def own_pool(monkeypatch):
    """A pool of part processes of the test's own (``spawned``: every process it started),
    ended after it."""
    pool = partprocs.Pool()
    pool.spawned = []
    real = partprocs._spawn
    monkeypatch.setattr(partprocs, "POOL", pool)
    monkeypatch.setattr(partprocs, "_spawn", lambda: pool.spawned.append(real()) or pool.spawned[-1])
    yield pool
    for p in pool.procs:
        partprocs._end(p)


def gone(procs) -> bool:
    """Every one of these processes ended and reaped."""
    return all(p.returncode is not None and not os.path.exists(f"/proc/{p.pid}") for p in procs)


def test_a_part_whose_process_dies_is_read_on_one_core(small_parts, own_pool, monkeypatch):
    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"
    one = outcome(read_trace, path, workers=1)
    monkeypatch.setattr(partprocs, "WORKER", "import sys; sys.exit(3)")
    before = set(os.listdir("/proc/self/fd"))
    assert_same(one, outcome(read_trace, path, workers=3))
    assert not small_parts  # nothing joined: read again on one core
    assert own_pool.spawned and not own_pool.procs and gone(own_pool.spawned)  # the processes are gone
    assert set(os.listdir("/proc/self/fd")) <= before  # and the files closed


def test_a_part_s_process_loads_the_reader_not_the_library_s_api(small_parts, own_pool):
    """A part's process builds rows, never frames: it runs the reader's modules without the
    packages' __init__, so pandas and pyarrow (40 MB of its own memory, as much again of
    mapped libraries) never load in it, on every one of a many-core node's processes."""
    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"
    assert_same(outcome(read_trace, path, workers=1), outcome(read_trace, path, workers=3))
    assert len(small_parts) == 2 and all(small_parts) and len(own_pool.procs) == 2
    for proc in own_pool.procs:
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        loaded = {lib for lib in ("/pandas/", "/pyarrow/") if lib in maps}
        assert not loaded, f"a part's process {proc.pid} mapped {loaded}"
        assert "/numpy/" in maps  # it did load what a part needs


def test_an_interrupted_read_leaves_no_process_and_no_file(small_parts, own_pool):
    """Ctrl-C while this process reads the first part: the parts' processes, still working,
    are ended, and every file is closed; the next read starts new ones."""
    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"
    before = set(os.listdir("/proc/self/fd"))

    def interrupt(offset):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        read_trace(path, workers=3, progress=interrupt)
    assert own_pool.spawned and not own_pool.procs and gone(own_pool.spawned)
    assert set(os.listdir("/proc/self/fd")) <= before
    assert_same(outcome(read_trace, path, workers=1), outcome(read_trace, path, workers=3))
    assert small_parts and all(small_parts)
    assert len(own_pool.procs) == small_parts.planned[-1] - 1  # kept for the next read
    assert all(p.poll() is None for p in own_pool.procs)


def test_reads_in_parts_leave_the_warnings_of_other_threads_alone(small_parts, own_pool):
    """Another thread warns all through reads in parts: every warning reaches the program,
    the warning filters are as they were, and the reads are joined in parts."""
    import threading

    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"
    filters = list(warnings.filters)
    stop, told, emitted = threading.Event(), [], [0]

    def warner():
        while not stop.is_set():
            warnings.warn("from another thread", UserWarning, stacklevel=1)
            emitted[0] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        shown = warnings.showwarning
        warnings.showwarning = lambda message, *a, **k: told.append(str(message))
        t = threading.Thread(target=warner)
        t.start()
        try:
            for _ in range(3):
                read_trace(path, workers=3)
        finally:
            stop.set()
            t.join()
            warnings.showwarning = shown
        n = len(told)
    assert n == emitted[0] > 0 and set(told) == {"from another thread"}  # none swallowed
    assert warnings.filters == filters
    assert small_parts and all(small_parts)


def test_a_clock_that_is_not_linux_s_warns_once_and_reads_in_parts(small_parts):
    """Go on linux/arm64 writes a 62.5 MHz clock: every generation but the first would warn
    on its own; read in parts, the trace warns once, as on one core, and is joined."""
    model = tm.parse((FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out").read_bytes())
    n = 0
    for b in tm.batches(model):
        for lo, hi, kind in tm._fields(bytes(b.payload)) if b.exp is None else ():
            if kind == "freq":
                b.payload[lo:hi] = tm.enc(62_500_000)
                n += 1
    data = tm.write(model)
    one = outcome(parse_trace, data, workers=1)
    assert n > 1 and [w[0] for w in one[1]] == ["ClockWarning"]
    assert_same(one, outcome(parse_trace, data, workers=3))
    assert small_parts and all(small_parts)


def test_a_program_that_reaps_its_own_children_reads_in_parts(small_parts, own_pool):
    import signal

    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"
    old = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        assert_same(outcome(read_trace, path, workers=1), outcome(read_trace, path, workers=3))
    finally:
        signal.signal(signal.SIGCHLD, old)
    assert small_parts and all(small_parts)


def test_a_big_trace_is_read_in_parts_by_default(monkeypatch):
    """Without ``workers``, a trace of several parts is read by as many processes as there
    are CPUs (four or more), and on one core below that; the fleet's workers read on one."""
    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"
    monkeypatch.setattr(R, "CHUNK_BYTES", 1)
    monkeypatch.setattr(parallel, "PART_MIN_BYTES", 1)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1)
    assert parallel.WORKERS is None  # (nothing before set it for good)
    parts = []
    real = parallel.read
    monkeypatch.setattr(parallel, "read", lambda *a, **k: parts.append(len(a[4])) or real(*a, **k))
    for n in (2, 4, 16):  # the trace has 4 generations
        parts.clear()
        monkeypatch.setattr(parallel, "cpus", lambda n=n: n)
        read_trace(path)
        assert (bool(parts) and parts[0] > 1) == (n >= 4), (n, parts)
    monkeypatch.setattr(parallel, "WORKERS", 1)
    parts.clear()
    read_trace(path)
    assert parts == []
    monkeypatch.setattr(parallel, "WORKERS", None)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", path.stat().st_size + 1)
    monkeypatch.setattr(parallel, "cpus", lambda: 16)
    read_trace(path)  # smaller than a trace worth sharing
    assert parts == []
    read_trace(path, workers=4)  # unless asked
    assert parts and parts[0] > 1
    for bad in (0, -2, 1.5, "4", True):
        with pytest.raises(UsageError, match="workers"):
            read_trace(path, workers=bad)


def test_mutants_read_in_parts_as_on_one_core(small_parts):
    """Hostile traces: the same tables, or the same error, and the same warnings."""
    seeds = [FIXTURES / "traces" / n for n in ("tiny-go1.22.trace", "tiny-go1.26.trace")]
    seeds += sorted((FIXTURES / "runs").glob("cpu-*/trace.out"))
    models = [tm.parse(p.read_bytes()) for p in seeds]
    for k in range(200):
        data, what = tm.mutant(models, 21, k)
        one = outcome(parse_trace, data, source="m", workers=1)
        assert_same(one, outcome(parse_trace, data, source="m", workers=3), f"mutant {k} [{what}]")
    assert sum(small_parts) > 50  # many read in parts, not all sent back to one core


def _group(rows, m_ids, *, first_stop=None, last_start=None, orphans=(), sweeps=(), sweep_end=None):
    """What the compiled pass gives for one chunk (see Builder._threads_compiled)."""
    n = len(rows["g"])
    group = {k: np.asarray(v, dtype=np.int64) for k, v in rows.items()}
    group["done"] = group["end"] >= 0
    group["gen"], group["seq"] = group["gen"].astype(np.int32), group["seq"].astype(np.int32)
    ends = sweep_end or {}
    group.update(
        p=np.zeros(n, np.int32),
        label_pos=np.zeros(0, np.int64),
        label_names=[],
        orphan_labels=list(orphans),
        m_ids=np.asarray(m_ids),
        first_stop_t=np.array([(first_stop or {}).get(m, -1) for m in m_ids]),
        last_start_row=np.array([(last_start or {}).get(m, -1) for m in m_ids]),
        first_sweep_end=tuple(np.array([ends.get(m, (-1, 0, 0))[i] for m in m_ids]) for i in range(3)),
        sweep={
            "p": np.zeros(len(sweeps), np.int64),
            "m": np.array([s[0] for s in sweeps], np.int64),
            "start_ns": np.array([s[1] for s in sweeps], np.int64),
            "end_ns": np.array([s[2] for s in sweeps], np.int64),
            "swept_bytes": np.zeros(len(sweeps), np.int64),
            "reclaimed_bytes": np.zeros(len(sweeps), np.int64),
            "done": np.array([s[2] >= 0 for s in sweeps], bool),
        },
    )
    return group


def test_a_join_resolves_what_the_part_before_left_open():
    """Thread 1's interval and thread 2's sweep are open when the first part ends; the
    second part's first stop and sweep end close them, and a label on thread 1 before any
    start there names the goroutine it started in the first part. Goroutine 7 starts on
    thread 2 before its interval on thread 1 ends (clocks that disagree): the overlap
    across the join is settled as one builder settles it."""
    want = frozenset({"running", "sweep"})
    first = _group(
        {"g": [5, 7], "m": [1, 1], "start": [100, 120], "end": [110, -1], "gen": [1, 1], "seq": [1, 2]},
        [1, 2],
        last_start={1: 1},
        sweeps=[(2, 105, -1)],
    )
    second = _group(
        {"g": [7, 9], "m": [2, 1], "start": [140, 160], "end": [170, 180], "gen": [2, 2], "seq": [3, 1]},
        [1, 2],
        first_stop={1: 150},
        orphans=[(1, "GC (dedicated)")],
        sweep_end={2: (130, 8192, 4096)},
    )

    def fed(b, *groups):
        for g in groups:
            b.feed_running([{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in g.items()}])
            b.flush()
        return b

    one = fed(T.Builder(want), first, second).finish(1000)
    a = fed(T.Builder(want), first)
    b = T.Builder(want)
    b.edge = Edge()
    fed(b, second)
    info = {**new_info(), "m_first": {}}
    assert parallel.join(a, new_info(), export(b, {}, info))
    two = a.finish(1000)
    for name in ("running", "sweep"):
        pd.testing.assert_frame_equal(one[name], two[name], check_exact=True)
    run = two["running"]
    assert run.end_ns.tolist() == [110, 150, 170, 180]  # closed at thread 1's first stop
    assert run.start_ns.tolist() == [100, 120, 150, 160]  # 7 on thread 2 waits for thread 1
    assert run.label.tolist() == ["", "GC (dedicated)", "", ""]
    sweep = two["sweep"][["end_ns", "swept_bytes", "reclaimed_bytes", "open"]]
    assert sweep.values.tolist() == [[130, 8192, 4096, False]]


def test_cpus_are_held_to_the_cgroup_limit(tmp_path):
    """The limit on the reader's cgroup or one above it caps the processes (a fixture tree:
    the lab test below checks a real cgroup)."""
    v2 = tmp_path / "v2"
    (v2 / "kubepods" / "pod1").mkdir(parents=True)
    (v2 / "kubepods" / "cpu.max").write_text("max 100000\n")
    (v2 / "kubepods" / "pod1" / "cpu.max").write_text("150000 100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/kubepods/pod1\n")
    assert process_cpu_limit(str(proc), str(v2)) == 1.5
    (v2 / "kubepods" / "cpu.max").write_text("50000 100000\n")
    assert process_cpu_limit(str(proc), str(v2)) == 0.5  # the tighter one above
    proc.write_text("0::/\n")
    assert process_cpu_limit(str(proc), str(v2)) is None
    assert process_cpu_limit(str(tmp_path / "none"), str(v2)) is None
    proc.write_bytes(b"0::/kubepods/caf\xe9\n")  # any byte but "/" and NUL names a cgroup
    assert process_cpu_limit(str(proc), str(v2)) == 0.5  # (the part above is read)


@pytest.mark.lab
def test_a_reader_in_a_limited_cgroup_counts_its_limit():
    from gmpanalysis.lab import LabCgroup

    code = "import os; from gmpanalysis.gotrace import parallel; print(parallel.cpus(), len(os.sched_getaffinity(0)))"
    got = {}
    for quota in (50_000, None):
        cg = LabCgroup(f"gmp-lab-test-{os.getpid()}-{os.urandom(3).hex()}")
        cg.create(quota_us=quota, period_us=100_000)
        try:
            out = subprocess.run(
                [sys.executable, "-c", code], preexec_fn=cg.join_in_child, capture_output=True, text=True, check=True
            )
            got[quota] = [int(x) for x in out.stdout.split()]
        finally:
            cg.remove()
    assert got[50_000][0] == 1  # half a CPU: one process
    assert got[None][0] == got[None][1]  # no limit: every CPU of the affinity mask


def test_an_error_of_the_caller_during_a_read_in_parts_is_its_own(small_parts, own_pool):
    """A progress callback that cancels (or a timer's exception) stops the read, as on one
    core: it is not taken for a failure of the parts and read again."""
    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"

    class Cancelled(Exception):
        pass

    def cancel(offset):
        raise Cancelled

    with pytest.raises(Cancelled):
        read_trace(path, workers=3, progress=cancel)
    assert gone(own_pool.spawned)


def test_the_parts_processes_run_this_process_s_code_not_the_directory_s(small_parts, own_pool, tmp_path, monkeypatch):
    """A module planted in the current directory is not imported by a part's process (it
    starts isolated, with this process's sys.path); lines it prints are not its answer."""
    path = (FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out").resolve()
    marker = tmp_path / "imported"
    (tmp_path / "numpy.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(partprocs, "WORKER", "print('1'); print('noise'); " + partprocs.WORKER)
    assert_same(outcome(read_trace, path, workers=1), outcome(read_trace, path, workers=3))
    assert not marker.exists()
    assert small_parts and all(small_parts)


def test_a_part_s_process_that_never_answers_is_ended_and_the_trace_read_on_one_core(
    small_parts, own_pool, monkeypatch
):
    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"
    monkeypatch.setattr(partprocs, "WORKER", "import sys, time; sys.stdin.readline(); time.sleep(60)")
    monkeypatch.setattr(partprocs, "WAIT_S", 1.0)
    one = outcome(read_trace, path, workers=1)
    assert_same(one, outcome(read_trace, path, workers=3))
    assert not small_parts and own_pool.spawned and gone(own_pool.spawned)


def test_processes_that_cannot_be_started_leave_the_read_to_one_core(small_parts, own_pool, monkeypatch):
    path = FIXTURES / "runs" / "alloc-0.5cpu-gmp8" / "trace.out"
    one = outcome(read_trace, path, workers=1)
    monkeypatch.setattr(sys, "executable", str(path.parent / "no-python-here"))
    monkeypatch.setattr(sys, "path", [*sys.path, Path("/a/path/object"), b"/bytes"])
    assert_same(one, outcome(read_trace, path, workers=3))
    assert not small_parts and not own_pool.procs


@given(st.lists(st.lists(st.integers(-(2**62), 2**62), max_size=60), max_size=40))
@settings(max_examples=200, deadline=None)
def test_seen_ids_is_a_set_in_few_runs(batches):
    # each chunk's goroutines (sorted, unique) asked of the part's set: new exactly where a
    # plain set says so, and the set kept in at most log2(n) + 1 sorted runs of falling size
    # (one run grown by a union per chunk made a long trace's part quadratic)
    seen, plain = SeenIds(), set()
    for batch in batches:
        ids = np.unique(np.array(batch, dtype=np.int64))
        new = seen.add_new(ids)
        assert new.tolist() == [x not in plain for x in ids.tolist()]
        plain.update(ids.tolist())
        assert len(seen) == len(plain)
        sizes = [len(r) for r in seen.runs]
        assert all(a > b for a, b in zip(sizes, sizes[1:], strict=False)), sizes
        assert len(sizes) <= max(len(plain), 1).bit_length() + 1
        assert all((np.diff(r) > 0).all() for r in seen.runs)


def test_a_part_exports_no_set_of_its_goroutines():
    # the join reads the heads; the part's set of every goroutine it met stays behind
    b = T.Builder(frozenset({"running"}))
    b.edge = Edge()
    b.edge.seen.add_new(np.arange(5, dtype=np.int64))
    assert len(export(b, {}, {k: None for k in INFO_KEYS})["edge"].seen) == 0


def test_seen_ids_merges_each_id_a_few_times(monkeypatch):
    # a server's trace meets new goroutines in every chunk: 2,000 chunks of 50 new ids each
    # must cost O(n log n) elements merged in all, not a pass over the whole set per chunk
    import gmpanalysis.gotrace.edge as edge_mod

    merged = [0]

    class CountingNumpy:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def sort(a, **kw):
            merged[0] += len(a)
            return np.sort(a, **kw)

    monkeypatch.setattr(edge_mod, "np", CountingNumpy())
    seen = SeenIds()
    for k in range(2000):
        ids = np.arange(k * 50, k * 50 + 50, dtype=np.int64)
        assert seen.add_new(ids).all()
        assert not seen.add_new(ids[::7]).any()
    n = 2000 * 50
    assert len(seen) == n
    assert merged[0] <= n * n.bit_length(), merged[0]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_part_s_process_ends_when_the_reading_process_dies_mid_job(tmp_path):
    # a job that never ends (the trace it names a FIFO nobody writes: opening it waits for
    # a writer): only the reading process's death can end the part's process, which sees
    # its closed pipe between jobs only
    import pickle

    fifo = tmp_path / "trace"
    os.mkfifo(fifo)
    job = tmp_path / "job"
    job.write_bytes(pickle.dumps({"compiled": False, "data": str(fifo)}))
    code = (
        "import os, time\n"
        "from gmpanalysis.gotrace import partprocs\n"
        "p = partprocs._spawn()\n"
        f"p.stdin.write({str(job)!r}.encode() + b'\\n'); p.stdin.flush()\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(1)\n"
        "os._exit(0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    pid = int(r.stdout.split()[0])
    try:
        deadline = time.monotonic() + 10 * partprocs.WATCH_S + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the part's process outlived the reading process"
    finally:
        if _alive(pid):
            os.kill(pid, 9)


class _WrongP:
    """Parts read in this process, each from its threads' states as the generation before
    it gives them but every P wrong: a guess that only a row or sweep taking the P before
    the thread restates it can spoil."""

    def __init__(self, parts, want, version, source, feed):
        self.parts, self.want, self.version, self.source, self.feed = parts, want, version, source, feed

    def start(self, data, fd):
        self.data = data
        return True

    def result(self, k, deadline):
        from gmpanalysis.gotrace.part import read_part

        w, winfo = T.Builder(self.want), {**new_info(), "quiet": []}
        self.feed(w, winfo, [self.parts[k - 1][-1][-1]])
        start = {m: (g, run, 1000 + p) for m, (g, run, p) in w.m_state.items()}
        buf = np.frombuffer(self.data, dtype=np.uint8)
        got = read_part(
            self.data, buf, self.version, self.source, self.parts[k], self.want, self.feed,
            start=start, frequency=winfo["frequency"],
        )  # fmt: skip
        return got, None

    def stop(self):
        pass


# real runs of three generations and more: joins between whole generations
MANY_GENERATIONS = [
    p
    for p in TRACES + SHARED_TRACES
    if p.parent.name in {"alloc-0.5cpu-gmp8", "cpu-0.5cpu-gmp8", "nested-0.5cpu-pod0.5-gmp2", "cpu-1cpu-gmp1",
                         "light-250m-numcpu", "v2-alloc-gmp8"}
]  # fmt: skip


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("path", MANY_GENERATIONS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_a_wrong_guess_of_a_p_the_part_never_takes_costs_no_second_read(path, compiled, small_parts, monkeypatch):
    # each thread restates its P in every generation it holds one: a P guessed wrong is
    # harmless until a row or sweep takes it before that, and then the part is read again
    monkeypatch.setattr(kernels, "ENABLED", compiled)
    one = outcome(read_trace, path, workers=1)
    assert not isinstance(one[0], tuple), one  # read, not two reads failing alike
    monkeypatch.setattr(parallel._procs, "Workers", _WrongP)
    seen, real = [], parallel._accept_guess

    def accept(b, got):
        wrong = any(b.m_state.get(m, parallel.NO_STATE)[2] != g[2] for m, g in got["guess"].items())
        seen.append((wrong, real(b, got)))
        return seen[-1][1]

    monkeypatch.setattr(parallel, "_accept_guess", accept)
    assert_same(one, outcome(read_trace, path, workers=3), f"{path} compiled={compiled}")
    assert all(small_parts)
    assert any(wrong and ok for wrong, ok in seen), seen  # a wrong P kept, the tables the same


@pytest.mark.parametrize("compiled", [True, False])
def test_a_part_notes_the_threads_whose_p_it_took_before_restating_it(compiled, monkeypatch):
    # thread 1 starts a goroutine on the P it came in with (taken), then starts a P;
    # thread 2 restates its P before it starts one (set, not taken); a sweep on thread 3
    # takes its P; thread 4 only stops; thread 5 restates an idle P (neither)
    from gmpanalysis.gotrace import spec as S

    monkeypatch.setattr(kernels, "ENABLED", compiled)
    events = [
        (1, S.EV_GOSTART, 5, 1, 0),
        (1, S.EV_PROCSTART, 2, 0, 0),
        (2, S.EV_PROCSTATUS, 3, S.PROC_RUNNING, 0),
        (2, S.EV_GOSTART, 6, 1, 0),
        (3, S.EV_GCSWEEPBEGIN, 0, 0, 0),
        (4, S.EV_GOSTOP, 0, 0, 0),
        (5, S.EV_PROCSTATUS, 4, S.PROC_IDLE, 0),
    ]
    m, typ, a0, a1, a2 = (np.array(x, dtype=np.int64) for x in zip(*events, strict=True))
    m_ids, mi = np.unique(m, return_inverse=True)
    cols = {
        "m": m, "type": typ.astype(np.uint8), "a0": a0, "a1": a1, "a2": a2,
        "ts": np.arange(len(m), dtype=np.int64) * 100, "gen": np.ones(len(m), dtype=np.int32),
        "mi": mi.astype(np.int32), "m_ids": m_ids,
    }  # fmt: skip
    b = T.Builder(frozenset({"running", "sweep"}))
    b.edge = Edge()
    b.feed({k: v.copy() for k, v in cols.items()}, {})
    assert b.edge.p_used == {1, 3}
    assert b.edge.p_set == {1, 2}
    # a wrong P for thread 1 or 3 spoils the part; for 2, 4 or 5 it does not
    b2 = T.Builder(frozenset({"running"}))
    b2.m_state = {k: (-1, 0, 7) for k in range(1, 6)}
    for k, spoils in ((1, True), (2, False), (3, True), (4, False), (5, False)):
        got = {"guess": {k: (-1, 0, 8)}, "edge": b.edge}
        assert parallel._guess_missed(b2, got) is spoils, k


def test_one_core_for_a_task_holds_for_its_own_thread_only(monkeypatch):
    # a Dask worker may run tasks on several threads: the fleet's one core for its task must
    # not reach a read of another thread at the same time, nor outlast the task
    import threading

    monkeypatch.setattr(parallel, "cpus", lambda: 16)
    entered, release, seen = threading.Event(), threading.Event(), []

    def task():
        with parallel.on_one_core():
            seen.append(parallel.workers())
            entered.set()
            release.wait(10)

    t = threading.Thread(target=task)
    t.start()
    assert entered.wait(10)
    seen.append(parallel.workers())  # this thread, meanwhile
    release.set()
    t.join(10)
    assert seen == [1, 16]
    assert parallel.workers() == 16
    with parallel.on_one_core():
        with parallel.on_one_core():
            pass
        assert parallel.workers() == 1
    assert parallel.workers() == 16
