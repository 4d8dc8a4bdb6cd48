"""Structure-aware mutants of Go execution traces, and the check every mutant must pass.

Shared by tests/test_attack_traces.py (a few thousand, seeded, fast) and
benchmarks/attack_traces.py (25 000 and more). A seed trace is split into its wire
structure (header, batches with their gen/m/ts/len fields, end-of-generation bytes, and
inside each batch the varints of events, strings, stacks, CPU samples and the frequency and
clock snapshot of the sync batch); a mutation changes one piece and writes the trace back
with the batch lengths fixed up (or, on purpose, left stale), so most mutants get past the
framing and reach the decoder and the tables. Raw byte edits and cuts of the written bytes
are mixed in for what the structure does not foresee.

Mutant ``k`` of seed ``s`` depends only on (s, k, the seed traces): a failure is repeated
with ``mutant(models, s, k)``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import random
import re
import signal
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from gmpanalysis.errors import GmpError
from gmpanalysis.gotrace import parse_trace, spec
from gmpanalysis.gotrace.gcwork import gc_cpu
from gmpanalysis.gotrace.summary import df_running_by_p, df_stw_by_kind

HEADER_LEN = 16
INT64_MAX = (1 << 63) - 1
# values that tend to break decoders: 0, 1, varint length edges, int and float limits
INTERESTING = (
    0,
    1,
    2,
    63,
    64,
    0x7F,
    0x80,
    0x3FFF,
    0x4000,
    15_625_000,
    1_000_000_000,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    1 << 53,
    (1 << 56) - 1,
    (1 << 57) - 1,
    1 << 57,
    1 << 62,
    INT64_MAX,
    1 << 63,
    (1 << 64) - 2,
    (1 << 64) - 1,
)


def enc(v: int, width: int = 0) -> bytes:
    """Unsigned LEB128, padded with continuation bytes to ``width`` bytes if given (the
    runtime writes batch lengths as 10-byte padded varints)."""
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        if v or len(out) + 1 < width:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def dec(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = data[pos]
        v |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return v, pos
        shift += 7


@dataclasses.dataclass
class Batch:
    exp: int | None
    gen: int
    m: int
    ts: int
    payload: bytearray
    length: int | None = None  # a stale length to write instead of len(payload)


EOG = "EOG"  # the end-of-generation byte (Go >= 1.26)


@dataclasses.dataclass
class Model:
    header: bytearray
    items: list  # Batch | EOG
    version: int


def parse(data: bytes) -> Model:
    """The structure of a valid trace."""
    version = int(data[5:7])
    items: list = []
    pos = HEADER_LEN
    while pos < len(data):
        b = data[pos]
        if b == spec.EV_END_OF_GENERATION and version >= 26:
            items.append(EOG)
            pos += 1
            continue
        exp = None
        pos += 1
        if b == spec.EV_EXPERIMENTAL_BATCH:
            exp = data[pos]
            pos += 1
        gen, pos = dec(data, pos)
        m, pos = dec(data, pos)
        ts, pos = dec(data, pos)
        ln, pos = dec(data, pos)
        items.append(Batch(exp, gen, m, ts, bytearray(data[pos : pos + ln])))
        pos += ln
    return Model(bytearray(data[:HEADER_LEN]), items, version)


def write(model: Model) -> bytes:
    out = bytearray(model.header)
    for it in model.items:
        if it is EOG:
            out.append(spec.EV_END_OF_GENERATION)
            continue
        out += bytes([spec.EV_EVENT_BATCH]) if it.exp is None else bytes([spec.EV_EXPERIMENTAL_BATCH, it.exp])
        out += enc(it.gen) + enc(it.m) + enc(it.ts)
        out += enc(len(it.payload) if it.length is None else it.length, 10)
        out += it.payload
    return bytes(out)


def fields(b: Batch) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every varint (and type byte) in a batch payload, as far as the
    payload makes sense (an earlier mutation may have broken it)."""
    out: list[tuple[int, int, str]] = []
    if b.exp is not None or not b.payload:
        return out
    try:
        _fields_into(b.payload, out)
    except (IndexError, KeyError):
        pass  # a broken payload: the fields before the break
    return out


def _fields_into(p: bytearray, out: list[tuple[int, int, str]]) -> None:
    def var(pos: int, kind: str) -> int:
        _, end = dec(p, pos)
        out.append((pos, end, kind))
        return end

    pos, n, first = 1, len(p), p[0]
    out.append((0, 1, "kind"))
    if first == spec.EV_STRINGS:
        while pos < n:
            pos = var(pos + 1, "str_id")
            ln, _ = dec(p, pos)
            pos = var(pos, "str_len")
            out.append((pos, pos + ln, "str_bytes"))
            pos += ln
    elif first == spec.EV_STACKS:
        while pos < n:
            pos = var(pos + 1, "stack_id")
            nf, _ = dec(p, pos)
            pos = var(pos, "stack_n")
            for _ in range(nf * 4):
                pos = var(pos, "frame")
    elif first == spec.EV_CPU_SAMPLES:
        while pos < n:
            for kind in ("cpu_ts", "cpu_m", "cpu_p", "cpu_g", "cpu_stack"):
                pos = var(pos + (kind == "cpu_ts"), kind)
    elif first in (spec.EV_SYNC, spec.EV_FREQUENCY):
        pos = 0 if first == spec.EV_FREQUENCY else 1
        while pos < n:
            if p[pos] == spec.EV_FREQUENCY:
                pos = var(pos + 1, "freq")
            else:
                for kind in ("snap_dt", "snap_mono", "snap_sec", "snap_nsec"):
                    pos = var(pos + (kind == "snap_dt"), kind)
    else:
        pos = 0
        while pos < n:
            t = p[pos]
            out.append((pos, pos + 1, "type"))
            pos = var(pos + 1, "dt")
            for _ in spec.EVENTS[t][1]:
                pos = var(pos, "arg")


# how often each kind of field is picked for a value change: the clock fields first
WEIGHTS = {"freq": 12, "dt": 8, "snap_dt": 3, "snap_mono": 3, "arg": 8, "type": 3, "str_len": 3, "str_id": 2}


def batches(model: Model) -> list[Batch]:
    """The model's batches, in file order (the end-of-generation markers left out)."""
    return [it for it in model.items if it is not EOG]


def _pick_field(rng: random.Random, model: Model) -> tuple[Batch, tuple[int, int, str]] | None:
    """A batch (the few clock batches weighted up), then a field in it (by ``WEIGHTS``)."""
    bs = [b for b in batches(model) if b.exp is None and b.payload]
    if not bs:
        return None
    clock = (spec.EV_SYNC, spec.EV_FREQUENCY)
    b = rng.choices(bs, weights=[4 if b.payload[0] in clock else 1 for b in bs])[0]
    fs = _fields(bytes(b.payload))
    return b, rng.choices(fs, weights=[WEIGHTS.get(f[2], 1) for f in fs])[0]


@functools.lru_cache(maxsize=256)
def _fields(payload: bytes) -> list[tuple[int, int, str]]:
    return fields(Batch(None, 0, 0, 0, bytearray(payload)))


def _value(rng: random.Random, old: int) -> int:
    r = rng.random()
    if r < 0.55:
        return rng.choice(INTERESTING)
    if r < 0.75:
        return max(0, old + rng.randint(-3, 3))
    if r < 0.9:
        return min((1 << 64) - 1, old * rng.choice((2, 10, 64, 1000, 1 << 20)))
    return rng.getrandbits(rng.randint(1, 64))


def m_field_value(rng: random.Random, model: Model, donors: list[Model]) -> str:
    pf = _pick_field(rng, model)
    if pf is None:
        return "no field"
    b, (s, e, kind) = pf
    if kind in ("type", "kind"):
        b.payload[s] = rng.choice((0, 1, 8, 9, 26, 27, 44, 48, 49, 50, 51, 52, 53, 127, 128, 136, 137, 255))
        return f"{kind} byte"
    if kind == "str_bytes":
        if e > s:
            i = rng.randrange(s, e)
            b.payload[i] = rng.choice((0x00, 0x80, 0xC0, 0xFF, 0xED))
        return "string bytes"
    old, _ = dec(b.payload, s)
    new = _value(rng, old)
    r = rng.random()
    if r < 0.05:
        raw = b"\x80" * rng.randint(10, 14) + b"\x01"  # longer than 10 bytes
    elif r < 0.1:
        raw = b"\xff" * 9 + bytes([rng.choice((0x02, 0x7F))])  # 10 bytes, beyond 64 bits
    else:
        raw = enc(new, rng.choice((0, 0, 0, 10)))
    b.payload[s:e] = raw
    if rng.random() < 0.15:
        b.length = len(b.payload) - len(raw) + (e - s)  # the old, stale length
    return f"{kind} {old} -> {new}"


def m_batch_header(rng: random.Random, model: Model, donors: list[Model]) -> str:
    bs = batches(model)
    b = rng.choice(bs)
    f = rng.choice(("gen", "m", "ts", "ts", "len", "exp"))
    if f == "len":
        b.length = max(0, len(b.payload) + rng.choice((-3, -1, 1, 2, 64, 1 << 16, 1 << 21, (1 << 64) - 1)))
    elif f == "exp":
        b.exp = None if b.exp is not None else rng.choice((0, 1, 2, 255))
    else:
        setattr(b, f, _value(rng, getattr(b, f)))
    return f"batch {f}"


def m_frequency(rng: random.Random, model: Model, donors: list[Model]) -> str:
    for b in batches(model):
        for s, e, kind in _fields(bytes(b.payload)) if b.exp is None else ():
            if kind == "freq":
                v = rng.choice((0, 1, 2, 1000, 15_625_001, 62_500_000, 1 << 40, INT64_MAX, 1 << 63, (1 << 64) - 1))
                b.payload[s:e] = enc(v)
                if rng.random() < 0.5:
                    return f"frequency {v}"  # only the first generation's
    return "frequency"


def m_batches(rng: random.Random, model: Model, donors: list[Model]) -> str:
    items = model.items
    i = rng.randrange(len(items))
    op = rng.choice(("dup", "drop", "swap", "move"))
    if op == "dup":
        items.insert(rng.randrange(len(items) + 1), copy.deepcopy(items[i]))
    elif op == "drop":
        del items[i]
    elif op == "swap":
        j = rng.randrange(len(items))
        items[i], items[j] = items[j], items[i]
    else:
        it = items.pop(i)
        items.insert(rng.randrange(len(items) + 1), it)
    return f"{op} batch"


def _generations(model: Model) -> list[list]:
    """Items grouped by generation (each group ends with its EOG, if any)."""
    groups: list[list] = [[]]
    cur = None
    for it in model.items:
        if it is not EOG and cur is not None and it.gen != cur and model.version < 26:
            groups.append([])
        groups[-1].append(it)
        if it is EOG:
            groups.append([])
            cur = None
        else:
            cur = it.gen
    return [g for g in groups if g]


def m_generations(rng: random.Random, model: Model, donors: list[Model]) -> str:
    gens = _generations(model)
    op = rng.choice(("splice", "splice", "dup", "drop", "swap", "renumber", "eog"))
    if op == "splice":  # generations of another trace (maybe another version) in between
        donor = _generations(rng.choice(donors))
        k = rng.randrange(len(gens) + 1)
        gens[k:k] = copy.deepcopy(rng.sample(donor, rng.randint(1, len(donor))))
    elif op == "dup":
        k = rng.randrange(len(gens))
        gens.insert(k + rng.choice((0, 1)), copy.deepcopy(gens[k]))
    elif op == "drop" and len(gens) > 1:
        del gens[rng.randrange(len(gens))]
    elif op == "swap":
        rng.shuffle(gens)
    elif op == "renumber":
        k = rng.randrange(len(gens))
        new = _value(rng, 1)
        for it in gens[k]:
            if it is not EOG:
                it.gen = new
    else:  # drop or add an end-of-generation byte
        flat = [it for g in gens for it in g]
        eogs = [i for i, it in enumerate(flat) if it is EOG]
        if eogs and rng.random() < 0.5:
            del flat[rng.choice(eogs)]
        else:
            flat.insert(rng.randrange(len(flat) + 1), EOG)
        model.items = flat
        return "end-of-generation"
    model.items = [it for g in gens for it in g]
    return f"{op} generation"


def m_header(rng: random.Random, model: Model, donors: list[Model]) -> str:
    h = rng.choice((b"go 1.21 trace", b"go 1.27 trace", b"go 1.99 trace", b"go 1. trace", b"go 1.2x trace"))
    if rng.random() < 0.5:
        h = b"go 1.%d trace" % rng.choice((22, 23, 25, 26))  # another version's event table
    model.header = bytearray(h.ljust(HEADER_LEN, b"\0")[:HEADER_LEN])
    return f"header {h!r}"


STRUCT_OPS = (
    (m_field_value, 10),
    (m_frequency, 3),
    (m_batch_header, 4),
    (m_batches, 2),
    (m_generations, 3),
    (m_header, 1),
)


def raw_edit(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    b = bytearray(data)
    op = rng.randrange(5)
    i = rng.randrange(len(b)) if b else 0
    if op == 0 and b:
        b[i] ^= 1 << rng.randrange(8)
        return bytes(b), "raw edit: bit flipped"
    if op == 1 and b:
        b[i] = rng.choice((0x00, 0x7F, 0x80, 0xFF, 0x01, 0x34, 0x31, rng.randrange(256)))
        return bytes(b), "raw edit: byte set"
    if op == 2:
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        return bytes(b), "raw edit: bytes inserted"
    if op == 3 and b:
        del b[i : i + rng.randint(1, 16)]
        return bytes(b), "raw edit: bytes deleted"
    j = rng.randrange(len(b) + 1)
    b[j:j] = b[i : i + rng.randint(1, 64)]
    return bytes(b), "raw edit: bytes copied"


# the kinds of mutation (what :func:`mutation` reports): each structure-aware op, and for those
# that choose among several changes, each change; each raw edit; a cut of the written bytes
KINDS = (
    "m_field_value",
    "m_frequency",
    *(f"m_batch_header: batch {f}" for f in ("gen", "m", "ts", "len", "exp")),
    *(f"m_batches: {op} batch" for op in ("dup", "drop", "swap", "move")),
    *(f"m_generations: {op} generation" for op in ("splice", "dup", "drop", "swap", "renumber")),
    "m_generations: end-of-generation",
    "m_header",
    *(f"raw edit: {op}" for op in ("bit flipped", "byte set", "bytes inserted", "bytes deleted", "bytes copied")),
    "cut",
)
_BY_CHANGE = ("m_batch_header", "m_batches", "m_generations")


def mutant(models: list[Model], seed: int, k: int) -> tuple[bytes, str]:
    """Mutant ``k`` of run ``seed``: (bytes, what was done)."""
    data, what, _ = mutation(models, seed, k)
    return data, "; ".join(what)


def mutation(models: list[Model], seed: int, k: int) -> tuple[bytes, list[str], set[str]]:
    """Mutant ``k`` of run ``seed``: (bytes, what was done, its kinds: of :data:`KINDS`)."""
    rng = random.Random(seed * 1_000_003 + k)
    model = copy.deepcopy(rng.choice(models))
    what, kinds = [], set()
    r = rng.random()
    if r < 0.8:
        ops, w = zip(*STRUCT_OPS, strict=True)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            op = rng.choices(ops, weights=w)[0]
            what.append(op(rng, model, models))
            kinds.add(f"{op.__name__}: {what[-1]}" if op.__name__ in _BY_CHANGE else op.__name__)
        data = write(model)
    else:
        data = write(model)
        for _ in range(rng.choice((1, 1, 2, 4))):
            data, w1 = raw_edit(rng, data)
            what.append(w1)
            kinds.add(w1)
    if rng.random() < 0.12:
        cut = rng.randrange(len(data) + 1)
        data = data[:cut]
        what.append(f"cut at {cut}")
        kinds.add("cut")
    return data, what, kinds


# --- the check --------------------------------------------------------------------------


class Hang(BaseException):
    """The per-mutant CPU budget ran out (a BaseException: no handler may swallow it)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang


INTERVAL_TABLES = ("running", "sweep", "stw", "assist", "gc")
POINT_TABLES = (("heap", "t_ns"), ("logs", "t_ns"), ("gomaxprocs", "t_ns"))


def invariants(tr: Any) -> list[str]:
    """What must hold in every parsed trace, whatever its bytes."""
    bad = []
    m = tr.meta
    lo, hi = m["first_ns"], m["last_ns"]
    if not (0 <= lo <= hi <= INT64_MAX):
        bad.append(f"meta first_ns {lo} / last_ns {hi}")
    for name in INTERVAL_TABLES:
        df = getattr(tr, name)
        s, e = df.start_ns.to_numpy(), df.end_ns.to_numpy()
        if s.dtype != np.int64 or e.dtype != np.int64:
            bad.append(f"{name}: times are {s.dtype}/{e.dtype}")
        elif (e < s).any():
            i = int(np.flatnonzero(e < s)[0])
            bad.append(f"{name}: interval ends before it starts ({s[i]} .. {e[i]})")
        elif len(s) and (s.min() < lo or e.max() > hi):
            bad.append(f"{name}: times outside the trace [{lo}, {hi}]")
    for name, col in POINT_TABLES:
        t = getattr(tr, name)[col].to_numpy()
        if t.dtype != np.int64:
            bad.append(f"{name}.{col} is {t.dtype}")
        elif len(t) and (t.min() < lo or t.max() > hi):
            bad.append(f"{name}.{col} outside the trace [{lo}, {hi}]")
    if (tr.gomaxprocs.procs < 1).any():
        bad.append("gomaxprocs below 1")
    # the summaries the CLI prints must not fall over either
    repr(tr)
    gc_cpu(tr)
    df_stw_by_kind(tr)
    df_running_by_p(tr)
    return bad


PLACE = re.compile(r"offsets? \d+")


def attack(data: bytes, source: str, budget_s: float = 5.0) -> tuple[str, str]:
    """Parse one mutant under a budget of CPU seconds. Returns (outcome, detail): outcome is
    "parsed", "truncated" or "error" (a GmpError naming the source and an offset) when all
    is well, else "other" (another exception), "hang", "invariant" or "message".

    The budget counts this process's CPU time (ITIMER_PROF), not wall time: a decoder stuck
    in a loop burns CPU, while a machine busy with other work only stretches the wall clock.
    (Mutants are bytes in memory, so nothing here can block without spinning.)"""
    old = signal.signal(signal.SIGPROF, _on_alarm)
    signal.setitimer(signal.ITIMER_PROF, budget_s)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                tr = parse_trace(data, source=source)
                bad = invariants(tr)
            except GmpError as e:
                msg = str(e)
                if source not in msg or not PLACE.search(msg):
                    return "message", msg
                return "error", msg
            except Hang:
                return "hang", f"> {budget_s} s"
            except Exception as e:  # noqa: BLE001 - what the attack counts
                return "other", f"{type(e).__name__}: {e}"
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
    if bad:
        return "invariant", "; ".join(bad)
    return ("truncated" if tr.meta["truncated"] is not None else "parsed"), ""


def run(models: list[Model], seed: int, n: int, budget_s: float = 5.0) -> Iterator[tuple[int, str, str, str, set[str]]]:
    """(k, outcome, detail, what was done, its kinds) for mutants 0..n-1 of ``seed``."""
    for k in range(n):
        data, what, kinds = mutation(models, seed, k)
        outcome, detail = attack(data, f"mutant-{seed}-{k}.trace", budget_s)
        yield k, outcome, detail, "; ".join(what), kinds
