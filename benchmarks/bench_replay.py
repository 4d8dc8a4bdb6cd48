"""The CFS replay (gmpanalysis.cfsreplay, its loop in gmpanalysis.cfskernel): the loop
compiled by numba against the same loop in plain Python, in one process.

    .venv/bin/python benchmarks/bench_replay.py [--quick] [BUNDLE_DIR ...]

Times, each with the plain-Python loop and the compiled one and their ratio:

* the first compiled replay of a fresh process, apart: numba's import and the compilation
  (an empty numba cache), or the load of the compiled loop from the cache (filled);
* ``what_if`` of each shipped example run (fixtures/runs) under its own settings;
* ``advise`` of the shipped example (gmp.example_run()) and of each bundle under the
  directories given (default: benchmarks/data/16cpu-v2-1500m, 16-CPU closed-loop runs, where
  present, else the 16-CPU v2 runs of ../shared/data/16cpu-v2 beside the checkout),
  with the share of it spent in the replay itself;
* one hour of demand: a shipped run's requests tiled to an hour (open loop, its own quota,
  GOMAXPROCS and CPUs), and, where present, a 16-CPU closed-loop run's the same way,
  replayed by ``cfsreplay.replay`` directly.

The warm figures are the best of a few repeats after a first call (the run's inputs built
once, as advise builds them). ``--quick``: one repeat, the first 16-CPU bundle only. Not a
test.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from machine import describe

import gmpanalysis as gmp
from gmpanalysis import cfskernel
from gmpanalysis import cfsreplay as R
from gmpanalysis import whatif as W
from gmpanalysis.examples import CHECKOUT_RUNS, DEFAULT
from gmpanalysis.replayinputs import memo, prep_built

ROOT = Path(__file__).resolve().parents[1]
SIXTEEN = ROOT / "benchmarks" / "data" / "16cpu-v2-1500m"
SHARED_SIXTEEN = ROOT.parent / "shared" / "data" / "16cpu-v2"

FIRST_CALL = """
import time, warnings
warnings.simplefilter("ignore")
import numpy as np
from gmpanalysis.cfsreplay import replay
args = (np.arange(0, 10**9, 10**7), 3e6, None, 50_000, 100_000_000, 0, 0, 4, 4)
t0 = time.perf_counter(); replay(*args); t1 = time.perf_counter(); replay(*args); t2 = time.perf_counter()
print((t1 - t0) - (t2 - t1))
"""


def _load(path: Path) -> gmp.Run:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = gmp.load_run(path)
        memo(run, "prep", prep_built)  # the run's inputs, built once as advise builds them
    return run


def _best(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # the first call: numba's compile or cache load is timed apart
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _both(fn: Callable[[], Any], repeats: int, py_repeats: int | None = None) -> tuple[float, float]:
    """(plain Python, compiled) seconds of fn()."""
    out = []
    for enabled, r in ((False, py_repeats or repeats), (True, repeats)):
        cfskernel.ENABLED = enabled
        try:
            out.append(_best(fn, r))
        finally:
            cfskernel.ENABLED = True
    return out[0], out[1]


def _line(label: str, py: float, fast: float, extra: str = "") -> None:
    print(f"  {label:<52} python {py * 1000:9.1f} ms   compiled {fast * 1000:8.1f} ms   x{py / fast:6.1f}{extra}")


def first_call() -> None:
    """A fresh process's first compiled replay, less a warm one: with an empty numba cache
    (the compile, and the cache written), then with the cache filled (its load)."""
    print("first compiled replay of a process (numba's import included), less a warm one:")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        env.pop("GMP_NO_NUMBA", None)
        for what in ("compile (empty cache)", "cache load"):
            out = subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, cwd=ROOT, capture_output=True, text=True)
            if out.returncode:
                print(f"  {what}: failed\n{out.stderr}")
                return
            print(f"  {what:<52} {float(out.stdout.split()[-1]):.2f} s")


@contextlib.contextmanager
def _replay_share() -> Iterator[Callable[[Callable[[], Any]], Callable[[], float]]]:
    """``wrap(fn)``: fn timed, answering the share of its time spent in replay (the
    replay itself; the rest is what_if's and advise's own work around it)."""
    inner = W.replay_columns
    spent = [0.0]

    def timed(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t0

    def wrap(fn: Callable[[], Any]) -> Callable[[], float]:
        def one() -> float:
            spent[0] = 0.0
            t0 = time.perf_counter()
            fn()
            return spent[0] / (time.perf_counter() - t0)

        return one

    W.replay_columns = timed
    try:
        yield wrap
    finally:
        W.replay_columns = inner


def _share(wrap: Callable, fn: Callable[[], Any], repeats: int, py_repeats: int | None = None) -> tuple:
    """(python s, compiled s, "(replay x% -> y%)")."""
    shares: list[float] = []
    one = wrap(fn)
    py, fast = _both(lambda: shares.append(one()), repeats, py_repeats)
    return py, fast, f"   (in replay {shares[1]:.0%} -> {shares[-1]:.0%})"


def what_ifs(repeats: int) -> None:
    print("what_if under the run's own settings (shipped examples; the share of it in replay in brackets):")
    tot = [0.0, 0.0]
    with _replay_share() as wrap:
        for path in sorted(p for p in CHECKOUT_RUNS.iterdir() if (p / "meta.json").is_file()):
            run = _load(path)
            py, fast, share = _share(wrap, lambda run=run: W.what_if(run), repeats)
            tot[0] += py
            tot[1] += fast
            _line(path.name, py, fast, share)
    _line("all of them", *tot)


def advises(dirs: list[Path], repeats: int) -> None:
    print("advise (one plain-Python run; the share of it in replay in brackets):")
    with _replay_share() as wrap:
        for label, path, r in [(f"example {DEFAULT}", CHECKOUT_RUNS / DEFAULT, repeats)] + [
            (f"{p.parent.name}/{p.name}", p, max(1, repeats // 3)) for p in dirs
        ]:
            run = _load(path)
            _line(label, *_share(wrap, lambda run=run: gmp.advise(run), r, py_repeats=1))


def _hour_args(path: Path) -> tuple[tuple, int]:
    """replay's arguments for the run's demand tiled to one hour, under its own settings
    (the levels above left out); and the number of requests."""
    run = _load(path)
    prep = memo(run, "prep", prep_built)
    d, s = prep["demand"], prep["settings"]
    P = int(s["period_us"]) * 1000
    sched = np.asarray(d["sched_ns"], dtype=np.int64)
    cost = np.broadcast_to(np.asarray(d["cost_ns"], dtype=np.float64), sched.shape)
    shift = ((int(d["span_ns"][1]) - int(sched[0])) // P + 1) * P  # whole periods: the phase holds
    reps = int(np.ceil(3600e9 / shift))
    conc = d["concurrency"]
    if conc is None:
        tiled = (sched[None, :] + shift * np.arange(reps)[:, None]).ravel()
    else:  # a closed loop sends from the start, as many at a time as it has clients
        tiled = np.full(len(sched) * reps, sched[0])
    q = s["quota_us"]
    args = (tiled, np.tile(cost, reps), conc, q, P, prep["phase"], float(s["burst_us"]), int(s["gomaxprocs"]),
            int(s["cpus"]), s["slice_us"], s["hz"])  # fmt: skip
    return args, len(tiled)


def hours(dirs: list[Path]) -> None:
    print("one hour of demand, replayed by cfsreplay.replay (one plain-Python run, the best of two compiled):")
    for path in [CHECKOUT_RUNS / DEFAULT] + dirs[:1]:
        args, n = _hour_args(path)
        per = R.replay(*args)
        py, fast = _both(lambda args=args: R.replay(*args), 2, py_repeats=1)
        mode = "open loop" if args[2] is None else f"closed loop of {args[2]}"
        _line(f"{path.name}: {n:,} requests, {len(per):,} periods", py, fast, f"   ({mode})")


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    given = [Path(a) for a in sys.argv[1:] if a != "--quick"]
    roots = given or next(([d] for d in (SIXTEEN, SHARED_SIXTEEN) if d.is_dir()), [])
    dirs = sorted(p for d in roots for p in d.iterdir() if (p / "meta.json").is_file())
    if quick:
        dirs = dirs[:1]
    repeats = 1 if quick else 3
    print(describe())
    if not cfskernel.AVAILABLE:
        print("numba is not installed (the [fast] extra) or GMP_NO_NUMBA is set: nothing to compare")
        return 1
    first_call()
    what_ifs(repeats)
    advises(dirs, repeats)
    hours(dirs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
