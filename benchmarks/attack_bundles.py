"""The bundle attack, at scale: mutated copies of the shipped runs through load_run ->
df_periods -> compare_runs -> df_checks (see tests/bundle_mutants.py for the mutations).

Every mutant must give a result or a GmpError whose message names the bundle's file, within
10 s. Prints the outcome counts, then every other exception, hang and anonymous message
with the mutation that caused it (re-create one with its index and the seed), and how often
each kind of change was made. tests/test_attack_bundles.py runs one mutant of each kind and
40 random ones on every test run (250 random ones with GMP_FULL_ATTACK=1).

    nice -n 19 .venv/bin/python benchmarks/attack_bundles.py [N=3000] [SEED=1] [--only I]
        [--bases DIR [DIR ...]]

--bases takes run bundles or directories of them (fixtures/runs-v2 for the cgroup v2 runs,
../shared/data/16cpu-v2 for the 16-CPU ones); the default is fixtures/runs.

The process limits its address space to 8 GiB, so that a mutant asking for a grid of
hundreds of GiB fails (as a MemoryError, counted as a failure) instead of swapping.
"""

from __future__ import annotations

import argparse
import collections
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's gmpanalysis, not an installed one

from bundle_mutants import KINDS, RUNS, V2_KINDS, attack, clean, mutant, runs_in  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=3000)
    ap.add_argument("seed", nargs="?", type=int, default=1)
    ap.add_argument("--only", type=int, help="run only mutant number ONLY, with its traceback")
    ap.add_argument("--bases", nargs="+", type=Path, help="run bundles, or directories of them, to mutate")
    ap.add_argument("--budget", type=int, default=10, help="seconds per mutant before it counts as a hang")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = 8 << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))

    bases = runs_in(a.bases) if a.bases else RUNS
    rng = random.Random(a.seed)
    counts: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    made: collections.Counter[str] = collections.Counter()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gmp-attack-") as tmp:
        for i in range(a.n):
            m = mutant(rng, bases)
            made.update(m.kinds)
            if a.only is not None and i != a.only:
                continue
            d = m.write(Path(tmp) / f"m{i}")
            out = attack(d, a.budget)
            what = f"#{i} {m.base.name}: {'; '.join(m.what)}\n    "
            counts[out.kind] += 1
            if out.kind == "gmp":
                errors[out.error] += 1
                if not out.names_file:
                    counts["gmp_anonymous"] += 1
                    failures.append(f"{what}ANONYMOUS {out.error}: {out.message[:300]}")
                    print(failures[-1], flush=True)
            elif out.kind in ("bad", "hang"):
                failures.append(f"{what}{out.kind.upper()} {out.error}: {out.message}")
                print(failures[-1], flush=True)
                if a.only is not None:
                    print(out.tb)
            elif a.only is not None:
                print("notes:", *out.notes, sep="\n  ")
            if a.only is not None and out.tb:
                print(out.tb)
            clean(d)
    dt = time.monotonic() - t0
    total = sum(counts[k] for k in ("ok", "gmp", "bad", "hang"))
    print(
        f"\n{total} mutants of {len(bases)} bases in {dt:.0f} s (seed {a.seed}): {counts['ok']} analysed, "
        f"{counts['gmp']} GmpError "
        f"({counts['gmp_anonymous']} not naming the file), {counts['bad']} other exceptions, {counts['hang']} hangs"
    )
    print("GmpError classes:", dict(errors.most_common()))
    print("changes:", ", ".join(f"{k} {made[k]}" for k in (*KINDS, *V2_KINDS)))
    return 1 if counts["bad"] or counts["hang"] or counts["gmp_anonymous"] else 0


if __name__ == "__main__":
    sys.exit(main())
