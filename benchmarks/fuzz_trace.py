"""Mutation fuzzing of the Go trace reader: every input must either parse or raise
TraceFormatError (truncation gives a warning and the complete generations) — never another
exception, never a hang.

    .venv/bin/python benchmarks/fuzz_trace.py [N] [SEED]

Mutations of the shipped tiny traces: byte flips, random bytes, insertions, deletions,
duplicated and swapped chunks, truncations. Prints the count and any failure with a repro.
"""

from __future__ import annotations

import random
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

from gmpanalysis.errors import TraceFormatError
from gmpanalysis.gotrace import read_trace

ROOT = Path(__file__).resolve().parents[1]
SEEDS = [ROOT / "fixtures" / "traces" / n for n in ("tiny-go1.22.trace", "tiny-go1.26.trace")]


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        op = rng.randrange(7)
        i = rng.randrange(len(b)) if b else 0
        if op == 0 and b:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[i] = rng.randrange(256)
        elif op == 2:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 3 and b:
            del b[i : i + rng.randint(1, 16)]
        elif op == 4 and b:
            j = rng.randrange(len(b))
            b[j:j] = b[i : i + rng.randint(1, 64)]
        elif op == 5:
            b = b[: rng.randrange(len(b) + 1)]
        elif op == 6 and b:
            b[i] = rng.choice((0x00, 0x7F, 0x80, 0xFF, 0x01, 0x34, 0x31))
    return bytes(b)


class Hang(Exception):
    pass


def _alarm(signum, frame):  # noqa: ANN001
    raise Hang


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    rng = random.Random(seed)
    seeds = [p.read_bytes() for p in SEEDS]
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    counts = {"parsed": 0, "truncated": 0, "TraceFormatError": 0}
    failures = 0
    t0 = time.monotonic()
    for k in range(n):
        data = mutate(rng, rng.choice(seeds))
        signal.alarm(5)
        try:
            tr = read_trace(data)
            counts["truncated" if tr.meta["truncated"] is not None else "parsed"] += 1
        except TraceFormatError:
            counts["TraceFormatError"] += 1
        except Hang:
            failures += 1
            print(f"HANG (>5 s) on input {k}: {data.hex()}")
        except Exception:  # noqa: BLE001 - reporting is the point
            failures += 1
            print(f"input {k}: {traceback.format_exc().strip().splitlines()[-1]}\n  repro: {data.hex()}")
            if failures >= 20:
                break
        finally:
            signal.alarm(0)
        if (k + 1) % 10_000 == 0:
            print(f"{k + 1} inputs, {time.monotonic() - t0:.0f}s: {counts}, failures {failures}", flush=True)
    total = sum(counts.values()) + failures
    print(f"done: {total} inputs (seed {seed}): {counts}; other exceptions or hangs: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
