"""Hostile copies of the shipped run bundles, and the pipeline every copy must survive.

A mutant is a copy of one shipped run with one to three structure-aware changes: a meta.json
field replaced by a value of the wrong type, a huge or odd number, odd unicode, or deleted;
meta.json text cut, nested too deep, carrying bytes that are not UTF-8 or a 5,000-digit
number; a CSV cell replaced by a hostile token; CSV lines cut, duplicated, swapped or
removed; a time jump or a counter going backwards; a whole file replaced by a directory, a
FIFO, a symlink loop, a symlink to /dev/zero, garbage or nothing; another run's trace.

:func:`attack` runs a mutant through load_run -> df_periods -> compare_runs -> df_checks.
The contract: every outcome is a result or a :class:`~gmpanalysis.errors.GmpError`
whose message names the file; no other exception, no hang. Used by
tests/test_attack_bundles.py (one mutant of each of :data:`KINDS` and a few dozen random
ones) and benchmarks/attack_bundles.py (many).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import traceback
import warnings
from pathlib import Path
from typing import Any

from bundle_mutants_v2 import V2_OPS, v2_op

REPO = Path(__file__).resolve().parents[1]
RUNS = sorted(p for p in (REPO / "fixtures" / "runs").iterdir() if (p / "meta.json").exists())
# cgroup v2 runs (v2-only columns: psi_*_us, local_throttled_us; nested levels; host ncpu)
RUNS_V2 = sorted(p for p in (REPO / "fixtures" / "runs-v2").iterdir() if (p / "meta.json").exists())
CSVS = ("cpu_stat.csv", "requests.csv", "host_stat.csv", "limits.csv")

# cumulative counters only cgroup v2 bundles carry (cpu.pressure, cpu.stat.local)
V2_COUNTERS = ("psi_some_us", "psi_full_us", "local_throttled_us")

HOSTILE_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    999,
    2**31,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    10**40,
    1.5,
    1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    "",
    "x",
    "١٢",
    "²",
    "\ud800",
    "a/../b",
    "$\\foo{x}$",
    "100000",
    "-5",
    "go1.99.1",
    "x" * 10_000,
    [],
    [1],
    [None],
    ["x"],
    {},
    {"a": 1},
    {"level": 1},
    {"level": "container", "quota_us": "x", "period_us": -1},
]

HOSTILE_CELLS: list[bytes] = [
    b"",
    b"x",
    b"-1",
    b"-0",
    b"0",
    b"nan",
    b"NaN",
    b"inf",
    b"-inf",
    b"1e400",
    b"1e19",
    b"1.5",
    b"9223372036854775807",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"1" * 40,
    b"1" * 5000,
    b"0x10",
    b"1_0",
    "١٢".encode(),
    "²".encode(),
    b"\xff\xfe",
    b"\x00",
    b" 5",
    b"5 ",
    b"--5",
    b"+5",
    b'"5"',
    b"5,5",
    b"container",
    b"pod",
]

# a special file in place of a regular one
SPECIALS = ("dir", "fifo", "loop", "devzero", "dangling", "missing", "empty", "garbage")


# the changes a mutant is made of (a random choice weighs some more than others)
META_OPS = ("set", "set", "set", "set", "del", "big", "deep", "cut", "bytes", "clock", "period", "go")
CSV_OPS = (
    *("cell", "cell", "cell", "cut", "dupline", "delline", "swap", "dupfile", "append", "noheader"),
    *("headeronly", "header", "fields", "crlf", "tmax", "jump", "back", "throttle", "requests"),
)
FILE_OPS = (*SPECIALS, "foreign")
TRACE_OPS = ("cut", "bytes")
V2_KINDS = tuple(f"v2.{op}" for op in V2_OPS)
# every kind of change, as a Mutant's kinds name them
KINDS = tuple(
    f"{family}.{op}"
    for family, ops in (("meta", META_OPS), ("csv", CSV_OPS), ("file", FILE_OPS), ("trace", TRACE_OPS))
    for op in dict.fromkeys(ops)
)


@dataclasses.dataclass
class Mutant:
    base: Path
    files: dict[str, bytes | str]  # name -> bytes, or the name of a special in SPECIALS
    what: list[str]
    kinds: set[str] = dataclasses.field(default_factory=set)  # of KINDS
    _said: int = dataclasses.field(default=0, repr=False)

    def did(self, family: str, op: str | None) -> None:
        """Record the change just tried among the kinds, if it changed something (said what)."""
        if op is not None and len(self.what) > self._said:
            self.kinds.add(f"{family}.{op}")
        self._said = len(self.what)

    def write(self, dst: Path) -> Path:
        """Write the mutant bundle into the (new) directory ``dst``."""
        dst.mkdir(parents=True)
        for name, v in self.files.items():
            p = dst / name
            if isinstance(v, bytes):
                p.write_bytes(v)
            elif v == "dir":
                p.mkdir()
                (p / "x").write_text("x\n")
            elif v == "fifo":
                os.mkfifo(p)
            elif v == "loop":
                os.symlink(p.name + ".b", p)
                os.symlink(p.name, dst / (p.name + ".b"))
            elif v == "devzero":
                os.symlink("/dev/zero", p)
            elif v == "dangling":
                os.symlink(dst / "nowhere", p)
            elif v == "missing":
                pass
            else:
                raise AssertionError(v)
        return dst


def _json_paths(x: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(x, dict):
        for k, v in x.items():
            out += _json_paths(v, (*prefix, k))
    elif isinstance(x, list):
        for i, v in enumerate(x[:3]):
            out += _json_paths(v, (*prefix, i))
    return out


def _set_path(x: Any, path: tuple, value: Any, delete: bool = False) -> None:
    for k in path[:-1]:
        x = x[k]
    if delete:
        del x[path[-1]]
    else:
        x[path[-1]] = value


def _meta_op(rng: random.Random, files: dict[str, bytes | str], what: list[str], op: str | None = None) -> str | None:
    raw = files.get("meta.json")
    if not isinstance(raw, bytes):
        return None
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError):  # already broken by an earlier op: break it further
        files["meta.json"] = raw[: rng.randrange(len(raw) + 1)]
        what.append("meta.json cut")
        return "cut"
    op = op or rng.choice(META_OPS)
    paths = _json_paths(meta)
    if op == "set" and paths:
        path = rng.choice(paths)
        v = rng.choice(HOSTILE_VALUES)
        _set_path(meta, path, v)
        what.append(f"meta {'.'.join(map(str, path))} = {v!r:.40}")
    elif op == "del" and paths:
        path = rng.choice(paths)
        _set_path(meta, path, None, delete=True)
        what.append(f"meta {'.'.join(map(str, path))} deleted")
    elif op == "big" and paths:
        path = rng.choice([p for p in paths if len(p) == 1] or paths)
        _set_path(meta, path, "__BIG__")
        digits = "9" * rng.choice((20, 40, 400, 5000))
        files["meta.json"] = json.dumps(meta).replace('"__BIG__"', digits).encode()
        what.append(f"meta {'.'.join(map(str, path))} = {len(digits)} digits")
        return op
    elif op == "deep":
        n = rng.choice((100, 10_000, 200_000))
        files["meta.json"] = raw.rstrip()[:-1] + b', "deep": ' + b"[" * n + b"]" * n + b"}"
        what.append(f"meta nested {n} deep")
        return op
    elif op == "cut":
        files["meta.json"] = raw[: rng.randrange(len(raw) + 1)]
        what.append("meta.json cut")
        return op
    elif op == "bytes":
        i = rng.randrange(len(raw))
        files["meta.json"] = raw[:i] + rng.choice((b"\xff", b"\xc3(", b"\x00", b"\xef\xbb\xbf")) + raw[i:]
        what.append(f"meta.json odd bytes at {i}")
        return op
    elif op == "clock":
        # the collection's clock moved away from the samples and the trace
        shift = rng.choice((-(10**12), 10**12, 10**15, 2**62))
        for k in ("mono_start_ns", "mono_end_ns"):
            if isinstance(meta.get(k), int):
                meta[k] += shift
        what.append(f"meta clock shifted {shift}")
    elif op == "period":
        meta["period_us"] = rng.choice((1000, 50_000, 99_000, 100_001, 200_000, 1_000_000))
        what.append(f"meta period_us = {meta['period_us']}")
    elif op == "go":
        meta["go_version"] = rng.choice(("go1.22.0", "go1.21.0", "devel", "go1.30", None))
        what.append(f"meta go_version = {meta['go_version']}")
    files["meta.json"] = json.dumps(meta, indent=1).encode()
    return op


def _lines(raw: bytes) -> list[bytes]:
    return raw.split(b"\n")


def _csv_op(
    rng: random.Random, files: dict[str, bytes | str], name: str, what: list[str], op: str | None = None
) -> str | None:
    raw = files[name]
    assert isinstance(raw, bytes)
    lines = _lines(raw)
    body = [i for i in range(1, len(lines)) if lines[i]]
    header = lines[0].split(b",")
    op = op or rng.choice(CSV_OPS)
    if op == "cell" and body:
        i = rng.choice(body)
        f = lines[i].split(b",")
        j = rng.randrange(len(f))
        f[j] = rng.choice(HOSTILE_CELLS)
        lines[i] = b",".join(f)
        what.append(f"{name} line {i + 1} field {j + 1} = {f[j][:20]!r}")
    elif op == "cut":
        k = rng.randrange(len(raw) + 1)
        files[name] = raw[:k]
        what.append(f"{name} cut at byte {k}")
        return op
    elif op == "dupline" and body:
        i = rng.choice(body)
        lines.insert(i, lines[i])
        what.append(f"{name} line {i + 1} doubled")
    elif op == "delline" and body:
        i = rng.choice(body)
        del lines[i]
        what.append(f"{name} line {i + 1} removed")
    elif op == "swap" and len(body) > 1:
        i, j = rng.sample(body, 2)
        lines[i], lines[j] = lines[j], lines[i]
        what.append(f"{name} lines {i + 1},{j + 1} swapped")
    elif op == "dupfile":
        files[name] = raw + raw
        what.append(f"{name} written twice")
        return op
    elif op == "append":
        files[name] = raw + b"\n".join(lines[1:])
        what.append(f"{name} rows appended again")
        return op
    elif op == "noheader":
        del lines[0]
        what.append(f"{name} header removed")
    elif op == "headeronly":
        files[name] = lines[0] + b"\n"
        what.append(f"{name} header only")
        return op
    elif op == "header":
        j = rng.randrange(len(header))
        header[j] = rng.choice((b"x", header[(j + 1) % len(header)], b"", b"t_ns"))
        lines[0] = b",".join(header)
        what.append(f"{name} header field {j + 1} renamed")
    elif op == "fields" and body:
        i = rng.choice(body)
        lines[i] = lines[i] + b",1" if rng.random() < 0.5 else lines[i].rsplit(b",", 1)[0]
        what.append(f"{name} line {i + 1} field count changed")
    elif op == "crlf":
        files[name] = raw.replace(b"\n", b"\r\n")
        what.append(f"{name} CRLF")
        return op
    elif op in ("tmax", "jump", "back", "throttle") and body and b"t_ns" in header:
        cols = {c.decode(errors="replace"): k for k, c in enumerate(header)}
        rows = [lines[i].split(b",") for i in body]
        at = rng.randrange(len(rows))
        if op == "tmax":
            v = rng.choice((2**63 - 1, 2**64, 2**62))
            rows[-1][cols["t_ns"]] = str(v).encode()
            what.append(f"{name} last t_ns = {v}")
        elif op == "jump":
            d = rng.choice((10**12, 10**15, 2**61))
            for r in rows[at:]:
                try:
                    r[cols["t_ns"]] = str(int(r[cols["t_ns"]]) + d).encode()
                except (ValueError, IndexError):  # a row an earlier mutation cut short
                    pass
            what.append(f"{name} t_ns jumps {d} at row {at}")
        else:
            counters = [c for c in ("nr_periods", "nr_throttled", "usage_us", "throttled_us") if c in cols]
            counters += [c for c in V2_COUNTERS if c in cols]
            c = rng.choice(counters or ["t_ns"])
            if op == "throttle" and "nr_throttled" in cols:
                c = "nr_throttled"
            d = rng.choice((1, 5, 100, 10_000))
            sign = 1 if op == "throttle" else -1
            for r in rows[at:]:
                try:
                    v = r[cols[c]]
                    r[cols[c]] = str(float(v) + sign * d if b"." in v else int(v) + sign * d).encode()
                except (ValueError, IndexError):  # a row an earlier mutation cut short
                    pass
            what.append(f"{name} {c} {'+' if sign > 0 else '-'}{d} from row {at}")
        for i, r in zip(body, rows, strict=True):
            lines[i] = b",".join(r)
    elif op == "requests" and name == "requests.csv" and body:
        cols = {c.decode(errors="replace"): k for k, c in enumerate(header)}
        i = rng.choice(body)
        f = lines[i].split(b",")
        try:
            f[cols["sched_ns"]] = str(int(f[cols["end_ns"]]) + rng.choice((1, 10**9))).encode()
        except (ValueError, KeyError, IndexError):
            return op
        lines[i] = b",".join(f)
        what.append(f"{name} line {i + 1} sched after end")
    else:
        return op
    files[name] = b"\n".join(lines)
    return op


def _file_op(
    rng: random.Random, files: dict[str, bytes | str], what: list[str], others: list[Path], op: str | None = None
) -> str | None:
    names = ["meta.json", *CSVS, "trace.out", "trace.out"]
    name = rng.choice(names if op is None else [n for n in names if n in files])
    op = op or rng.choice(FILE_OPS)
    if op == "foreign":
        if name == "trace.out" or rng.random() < 0.5:
            name = rng.choice(("trace.out", "requests.csv", "cpu_stat.csv"))
        src = rng.choice(others) / name
        if not src.exists():
            return op
        files[name] = src.read_bytes()
        what.append(f"{name} from {src.parent.name}")
        return op
    if op == "missing" and name not in files:
        return op
    if op == "empty":
        files[name] = b""
    elif op == "garbage":
        files[name] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 100, 4096))))
    else:
        files[name] = op
    what.append(f"{name} -> {op}")
    return op


def _trace_op(rng: random.Random, files: dict[str, bytes | str], what: list[str], op: str | None = None) -> str | None:
    raw = files.get("trace.out")
    if not isinstance(raw, bytes) or not raw:
        return None
    b = bytearray(raw)
    op = op or ("cut" if rng.random() < 0.5 else "bytes")
    if op == "cut":
        k = rng.randrange(len(b))
        b = b[:k]
        what.append(f"trace.out cut at {k}")
    else:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        what.append("trace.out bytes changed")
    files["trace.out"] = bytes(b)
    return op


def runs_in(dirs: list[Path]) -> list[Path]:
    """The run bundles named by ``dirs``: each is a bundle (it holds meta.json) or a
    directory of bundles."""
    out: list[Path] = []
    for d in map(Path, dirs):
        if (d / "meta.json").exists():
            out.append(d)
        elif d.is_dir():
            out += sorted(p for p in d.iterdir() if (p / "meta.json").exists())
        else:
            raise FileNotFoundError(f"{d}: no run bundle and no directory of them")
    return out


def mutant(rng: random.Random, bases: list[Path] | None = None, kind: str | None = None) -> Mutant:
    """One random mutant of a random shipped run (of ``bases``, default :data:`RUNS`): one to
    three random changes, or with ``kind`` (one of :data:`KINDS`) one change of that kind.
    A foreign file comes from another of the bases (of the same cgroup version and CPUs)."""
    base = rng.choice(bases or RUNS)
    files: dict[str, bytes | str] = {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()}
    others = [r for r in (bases or RUNS) if r != base] or [r for r in RUNS if r != base]
    m = Mutant(base, files, [])
    if kind is not None:
        family, op = kind.split(".")
        if family == "meta":
            m.did(family, _meta_op(rng, files, m.what, op))
        elif family == "csv":
            m.did(family, _csv_op(rng, files, "requests.csv" if op == "requests" else "cpu_stat.csv", m.what, op))
        elif family == "file":
            m.did(family, _file_op(rng, files, m.what, others, op))
        elif family == "v2":
            m.did(family, v2_op(rng, files, m.what, op))
        else:
            m.did(family, _trace_op(rng, files, m.what, op))
        return m
    raw = files.get("meta.json")
    v2 = isinstance(raw, bytes) and b'"cgroup_version": 2' in raw
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        if v2 and rng.random() < 0.25:
            m.did("v2", v2_op(rng, files, m.what))
            continue
        r = rng.random()
        if r < 0.3:
            m.did("meta", _meta_op(rng, files, m.what))
        elif r < 0.75:
            names = [n for n in CSVS if isinstance(files.get(n), bytes)]
            if names:
                m.did("csv", _csv_op(rng, files, rng.choice(names), m.what))
        elif r < 0.93:
            m.did("file", _file_op(rng, files, m.what, others))
        else:
            m.did("trace", _trace_op(rng, files, m.what))
    if not m.what:
        m.what.append("unchanged")
    return m


class Hang(BaseException):
    """The time budget of one mutant ran out (a BaseException: no handler of the library
    under test can swallow it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang


@dataclasses.dataclass
class Outcome:
    kind: str  # "ok", "gmp" (a GmpError), "bad" (any other exception), "hang"
    error: str = ""  # exception class name
    message: str = ""
    names_file: bool = True  # a GmpError's message names the bundle or one of its files
    tb: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)


def pipeline(path: Path) -> list[str]:
    """The user's path through a bundle; returns the run's notes."""
    import gmpanalysis as gmp
    from gmpanalysis.levels import ever_limited, level_names, level_run

    run = gmp.load_run(path)
    per = gmp.df_periods(run)
    gmp.compare_runs([run])
    gmp.df_checks(run)
    if run.meta.get("quota_us") is not None or run.limits is not None:
        # the replay of the run as it was, and a small advice over it
        w = gmp.what_if(run)
        gmp.advise(run, limits=(0.5, 1.0), gomaxprocs=(1,), bursts=(0.0,))
        widths = set((per["end_ns"] - per["start_ns"]).tolist())
        if len(widths) == 1 and not set((w["end_ns"] - w["start_ns"]).tolist()) <= widths:
            raise AssertionError(f"the replay's periods are not the table's {widths} ns")
    lat = per[["latency_p50_ms", "latency_p99_ms"]].to_numpy()
    if (lat < 0).any():
        raise AssertionError(f"negative latency in the period table: {lat[lat < 0][:3]}")
    # every counter increment of every limited level lands in a row, a group or outside
    tables = [per]
    if "cgroup" in run.samples:
        tables += [gmp.df_periods(run, level=lv) for lv in level_names(run) if ever_limited(level_run(run, lv))]
    for t in tables:
        c = gmp.df_conservation(t)
        off = (c["rows"] + c["groups"] + c["outside"] - c["delta"]).abs() > 1e-6 * c["delta"].abs().clip(lower=1.0)
        if off.any():
            raise AssertionError(f"counters not conserved: {c[off].head(3).to_dict('records')}")
    return list(run.notes)


def _disarm() -> None:
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.alarm(0)


def attack(path: Path, budget_s: int = 10) -> Outcome:
    """Run one bundle through :func:`pipeline` under a time budget and classify the result.

    The budget is CPU time (a loop that never ends spends it; on a loaded machine wall time
    ran out for mutants that took 0.6 s of CPU), plus six times as much wall time for what
    blocks without spinning (an open of a FIFO)."""
    from gmpanalysis.errors import GmpError

    old = signal.signal(signal.SIGALRM, _alarm), signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_PROF, budget_s)
    signal.alarm(6 * budget_s)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            notes = pipeline(path)
        _disarm()
        return Outcome("ok", notes=notes)
    except Hang:
        return Outcome("hang", "Hang", f"more than {budget_s} s of CPU or {6 * budget_s} s")
    except GmpError as e:
        _disarm()
        msg = str(e)
        return Outcome("gmp", type(e).__name__, msg, names_file=str(path) in msg, tb=traceback.format_exc())
    except BaseException as e:  # noqa: BLE001 - classifying every outcome is the point
        _disarm()
        if isinstance(e, KeyboardInterrupt):
            raise
        return Outcome("bad", type(e).__name__, str(e)[:300], tb=traceback.format_exc())
    finally:
        _disarm()
        signal.signal(signal.SIGALRM, old[0])
        signal.signal(signal.SIGPROF, old[1])


def clean(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
