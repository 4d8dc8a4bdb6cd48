"""The trace attack at full size: structure-aware mutants of every fixture trace through
read_trace and the summaries; counts what is not a GmpError, hangs and broken invariants.

    .venv/bin/python benchmarks/attack_traces.py [N] [SEED] [--budget S] [--one K] [--traces PATH ...]

N mutants (default 25 000) of run SEED (default 1), each under a budget of S CPU seconds
(default 10: the bound for one small input; CPU time, so a busy machine does not
turn slow mutants into hangs). ``--one K`` redoes mutant K and prints
what was done to it. ``--traces``: mutate these traces instead of the fixtures' (files, or
directories searched for ``*.trace``, ``trace.out`` and ``*/trace.out``: a bundle, or a
directory of them such as the 16-CPU runs of ../shared/data/16cpu-v2). The mutations are
in tests/trace_mutants.py; tests/test_attack_traces.py runs 600 of them, every kind of
mutation among them, on every test run (3,000 with GMP_FULL_ATTACK=1). Exit status 1 if
anything failed.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's package, not an installed one

from trace_mutants import KINDS, attack, mutant, parse, run  # noqa: E402

FAILURES = ("other", "hang", "invariant", "message")


def seed_paths(given: list[Path] | None = None) -> list[Path]:
    """The traces mutated: ``given`` (files, or directories of ``*.trace``, ``trace.out``
    and ``*/trace.out``), else the fixtures'."""
    if not given:
        return sorted((ROOT / "fixtures" / "traces").glob("*.trace")) + sorted(
            (ROOT / "fixtures" / "runs").glob("*/trace.out")
        )
    out: list[Path] = []
    for p in given:
        out += (
            [p]
            if p.is_file()
            else sorted(p.glob("*.trace")) + sorted(p.glob("trace.out")) + sorted(p.glob("*/trace.out"))
        )
    if not out:
        raise SystemExit(f"attack_traces: no trace in {[str(p) for p in given]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=25_000)
    ap.add_argument("seed", nargs="?", type=int, default=1)
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--one", type=int, default=None)
    ap.add_argument("--traces", nargs="+", type=Path, default=None, help="traces to mutate (default: the fixtures')")
    a = ap.parse_args()
    models = [parse(p.read_bytes()) for p in seed_paths(a.traces)]
    if a.one is not None:
        data, what = mutant(models, a.seed, a.one)
        print(f"mutant {a.one} of seed {a.seed} ({len(data)} bytes): {what}")
        print(*attack(data, f"mutant-{a.seed}-{a.one}.trace", a.budget))
        return 0
    counts: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    made: collections.Counter[str] = collections.Counter()
    shown = 0
    t0 = time.monotonic()
    slowest = (0.0, -1)
    c0 = time.process_time()
    for k, outcome, detail, what, kind in run(models, a.seed, a.n, a.budget):
        c1 = time.process_time()
        slowest = max(slowest, (c1 - c0, k))
        c0 = c1
        counts[outcome] += 1
        made.update(kind)
        if outcome in FAILURES:
            kinds[f"{outcome}: {detail.split(':')[0][:60]}"] += 1
            if shown < 30 or outcome == "hang":
                shown += 1
                print(f"mutant {k} [{what}]: {outcome}: {detail[:300]}", flush=True)
        if (k + 1) % 5000 == 0:
            print(f"{k + 1} mutants, {time.monotonic() - t0:.0f} s: {dict(counts)}", flush=True)
    bad = sum(counts[f] for f in FAILURES)
    print(f"\n{a.n} mutants of {len(models)} traces (seed {a.seed}) in {time.monotonic() - t0:.0f} s")
    for o in ("parsed", "truncated", "error", *FAILURES):
        print(f"  {o:10s} {counts[o]}")
    for kd, c in kinds.most_common(20):
        print(f"    {c:6d}  {kd}")
    print("mutations:", ", ".join(f"{kd} {made[kd]}" for kd in KINDS))
    print(f"slowest mutant: {slowest[1]}, {slowest[0]:.2f} s CPU (mutation and check)")
    print(
        f"non-GmpError {counts['other']}, hangs {counts['hang']}, invariant violations {counts['invariant']}, "
        f"messages without file/offset {counts['message']}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
