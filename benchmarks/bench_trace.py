"""Our Go trace reader against a straightforward Go program, same file, same run.

    .venv/bin/python benchmarks/bench_trace.py [--rounds N] [--workers N] [--markdown PATH] [TRACE] [BIG_TRACE]

The peer is gmp-tracepeer (collectors/cmd/gmp-tracepeer): what a competent Go user writes
with golang.org/x/exp/trace to build the same tables in memory (typed maps, slices of
structs, nothing formatted while reading). gmp-tracedump stays the correctness oracle.

Three comparisons, each repeated in interleaved rounds (ours, Go, ours, Go, ...) so both
see the same machine load; every figure is the median with its min and max:

1. Full read (all tables) of TRACE (default benchmarks/data/http-server.trace, 25 MB from
   make_big_trace.py). Cold: the first read in a fresh process, after imports. Warm: the
   best of 3 reads in one process. Goals: CPU <= 0.8x and wall <= 1.0x the peer, cold and
   warm; peak memory <= 4x the file. Timed on one core (``workers=1``), and again by as
   many processes as read_trace starts by itself where that is more than one (``--workers
   N`` to choose): goals on 8 cores or more, wall <= 0.5x the peer and CPU <= 1.0x (the CPU
   of the parts' processes counted).
2. STW, GC and GOMAXPROCS only, of BIG_TRACE (default benchmarks/data/http-server-big.trace,
   >= 500 MB: ``make_big_trace.py benchmarks/data/http-server-big.trace 380``), against the
   peer building the same three tables (it still decodes every event: x/exp/trace cannot
   skip). Goals: peak memory <= 300 MB, CPU <= 0.5x the peer.
3. A 1 s window from the middle of BIG_TRACE against a full read of it (ours both):
   decodes only the generations it overlaps (counted), goal >= 10x faster.

Peak memory is VmHWM from /proc/self/status: for ours minus the post-import baseline (the
interpreter, numpy and pandas), for Go the whole process. With the [fast] extra, numba's
module and compiled loops load on the first read (about 100 MB here); the full-read line
also gives the reader's own peak with them counted in the baseline. Not a test: numbers move with
what else the machine runs. ``--markdown PATH`` also writes the figures as the table of
docs/benchmarks.md (docs/benchmarks/results/trace-reader.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path

from gmpanalysis.gotrace import parallel
from gmpanalysis.lab import ensure_binaries

ROOT = Path(__file__).resolve().parents[1]
SELECTIVE = ("stw", "gc", "gomaxprocs")
# the figures as rows of the documentation's table: what, ours, Go, ours / Go
ROWS: list[tuple[str, str, str, str]] = []

PY = """
import json, os, resource, sys, time
import numpy, pandas
import gmpanalysis.gotrace as g

def hwm(pid="self"):  # VmHWM in KiB; None for a process gone (or a zombie: no memory left to report)
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None

path, repeat, tables, window = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
base = hwm()
if sys.argv[5] == "1":  # load the compiled code (numba's runtime) into the baseline first
    g.read_trace(sys.argv[6])
    base = hwm()
workers = json.loads(sys.argv[7])

from gmpanalysis.gotrace import partprocs

parts_base = {}
if sys.argv[5] == "1" and workers and workers > 1:  # the parts' processes started and their imports done first
    started = partprocs.POOL.take(workers - 1)
    for p in started:  # an empty job: answered (as failed) once the process's imports are done
        p.stdin.write(b"\\n")
        p.stdin.flush()
    for p in started:
        p.stdout.readline()
    partprocs.POOL.give_back(started, True)
    parts_base = {p.pid: hwm(p.pid) for p in started}

def pool_cpu():  # the CPU of the parts' processes, kept between reads: per process, from /proc
    out = {}
    for p in partprocs.POOL.procs:
        try:
            f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[p.pid] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return out

def cpu():  # this process, the processes it waited for, and the parts' processes
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime, pool_cpu()

def spent(a, b):
    return b[0] - a[0] + sum(v - a[1].get(pid, 0.0) for pid, v in b[1].items())

for i in range(repeat):
    t0, c0 = time.perf_counter(), cpu()
    tr = g.read_trace(path, tables=tables, window=window, workers=workers)
    t1, c1 = time.perf_counter(), cpu()
    print(json.dumps({"wall": t1 - t0, "cpu": spent(c0, c1), "peak_kib": hwm() - base, "events": tr.meta["events"],
                      "running": len(tr.running), "stw": len(tr.stw), "gc": len(tr.gc),
                      "generations": tr.meta["generations"], "decoded": tr.meta["generations_decoded"],
                      "first_ns": tr.meta["first_ns"], "last_ns": tr.meta["last_ns"],
                      "threads": len(os.listdir("/proc/self/task")),
                      "proc_cpu": sum(os.times()[:4]) + sum(pool_cpu().values()),
                      "parts_peak_kib": [h - parts_base.get(p.pid, 0) for p in partprocs.POOL.procs
                                         if (h := hwm(p.pid)) is not None and parts_base.get(p.pid) is not None]}),
          flush=True)
    del tr
"""


TINY = ROOT / "fixtures" / "traces" / "tiny-go1.26.trace"


def ours(
    path: Path,
    repeat: int = 1,
    tables: tuple[str, ...] | None = None,
    window: tuple[int, int] | None = None,
    runtime_in_base: bool = False,
    workers: int | None = 1,
) -> list[dict]:
    cmd = [sys.executable, "-c", PY, str(path), str(repeat), json.dumps(tables), json.dumps(window)]
    cmd += ["1" if runtime_in_base else "0", str(TINY), json.dumps(workers)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return [json.loads(x) for x in out.stdout.splitlines()]


def go(peer: Path, path: Path, repeat: int = 1, tables: tuple[str, ...] | None = None) -> list[dict]:
    cmd = [str(peer), "-repeat", str(repeat)]
    if tables:
        cmd += ["-tables", ",".join(tables)]
    out = subprocess.run([*cmd, str(path)], capture_output=True, text=True, check=True)
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    for r in rows:
        r["wall"], r["cpu"] = r["wall_ns"] / 1e9, r["cpu_ns"] / 1e9
    rows[-1]["peak_kib"] = rows[-1]["vm_hwm_kib"]
    return rows


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} s [{min(xs):.3f}-{max(xs):.3f}]"


def ratio(a: list[float], b: list[float]) -> str:
    return f"{statistics.median(a) / statistics.median(b):.2f}x"


def cell(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s [{min(xs):.2f}-{max(xs):.2f}]"


def markdown(machine: str, rounds: int) -> str:
    lines = [
        "<!-- rewritten by: .venv/bin/python benchmarks/bench_trace.py --markdown PATH -->",
        f"<!-- {datetime.date.today()}, {machine}; {rounds} rounds, median [min-max] -->",
        "",
        "| | ours | Go (gmp-tracepeer) | ours / Go |",
        "|---|---|---|---|",
    ]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in ROWS]) + "\n"


def full_read(peer: Path, path: Path, rounds: int, workers: int = 1) -> None:
    size = path.stat().st_size
    cold_o, cold_g, warm_o, warm_g = [], [], [], []
    peak_o = peak_g = 0
    on = "one core" if workers == 1 else f"{workers} processes"
    # the goals: on one core, those of the single-core reader; in parts, on 8 cores or more
    goal_cpu, goal_wall = ("0.8", "1.0") if workers == 1 else ("1.0", "0.5")
    for _ in range(rounds):
        a = ours(path, workers=workers)[0]
        b = go(peer, path)[0]
        cold_o.append(a)
        cold_g.append(b)
        peak_o, peak_g = max(peak_o, a["peak_kib"]), max(peak_g, b["peak_kib"])
        wa = ours(path, 3, workers=workers)
        wb = go(peer, path, 3)
        warm_o.append(min(wa, key=lambda r: r["wall"]))
        warm_g.append(min(wb, key=lambda r: r["wall"]))
    ev = cold_o[0]
    print(
        f"== full read on {on}: {path.name}, {size / 1e6:.1f} MB, {ev['events']:,} events (x/exp: "
        f"{cold_g[0]['events']:,}), {ev['running']:,} running intervals (peer: {cold_g[0]['running_intervals']:,}), "
        f"{rounds} rounds"
    )
    for what, o, g in (("cold", cold_o, cold_g), ("warm", warm_o, warm_g)):
        oc, ow = [r["cpu"] for r in o], [r["wall"] for r in o]
        gc, gw = [r["cpu"] for r in g], [r["wall"] for r in g]
        name = (
            f"full read on {on}, {size / 1e6:.1f} MB ({ev['events'] / 1e6:.1f} M events, "
            f"{ev['running'] / 1e6:.1f} M running intervals), {what}"
            if what == "cold"
            else f"same, {what} (best of 3 in one process)"
        )
        ROWS.append((f"{name}: CPU", cell(oc), cell(gc), ratio(oc, gc).replace("x", "×")))
        ROWS.append((f"same, {what}: wall", cell(ow), cell(gw), ratio(ow, gw).replace("x", "×")))
        print(
            f"  {what}: ours CPU {med(oc)} wall {med(ow)} | Go CPU {med(gc)} wall {med(gw)} "
            f"| ours/Go CPU {ratio(oc, gc)} (goal <= {goal_cpu}x), wall {ratio(ow, gw)} (goal <= {goal_wall}x)"
        )
    print(
        f"  ours, whole process (imports included, cold): CPU {med([r['proc_cpu'] for r in cold_o])}, "
        f"threads at the end {max(r['threads'] for r in cold_o)}"
    )
    o1 = ours(path, 1, None, None, True, workers)[0]  # numba's runtime counted in the baseline
    own, parts = o1["peak_kib"], o1["parts_peak_kib"]
    ROWS.append(
        (
            "same: peak memory, the reader's own (over the baseline with numba loaded)"
            + ("" if workers == 1 else "; this process, the parts' processes apart"),
            f"{own / 1024:.0f} MiB = {own * 1024 / size:.1f}× the file",
            f"{peak_g / 1024:.0f} MiB = {peak_g * 1024 / size:.1f}×",
            "",
        )
    )
    ROWS.append(
        (
            "same: peak memory over the imported baseline, numba's first load included",
            f"{peak_o / 1024:.0f} MiB = {peak_o * 1024 / size:.1f}×",
            "",
            "",
        )
    )
    print(
        f"  peak memory: ours +{peak_o / 1024:.0f} MiB = {peak_o * 1024 / size:.1f}x the file (goal <= 4x), "
        f"of which the reader's own +{own / 1024:.0f} MiB = {own * 1024 / size:.1f}x (the rest: numba, imported "
        f"and its loops loaded on the first read); Go {peak_g / 1024:.0f} MiB = {peak_g * 1024 / size:.1f}x"
    )
    if parts:
        total = own + sum(parts)
        ROWS.append(
            (
                "same: peak memory of the parts' processes over their start (imports done; numba's load included)",
                f"{sum(parts) / 1024:.0f} MiB in {len(parts)} ({max(parts) / 1024:.0f} MiB at most); with this "
                f"process's own {total / 1024:.0f} MiB = {total * 1024 / size:.1f}× the file",
                "",
                "",
            )
        )
        print(
            f"  the parts' processes: +{sum(parts) / 1024:.0f} MiB in {len(parts)} (at most +{max(parts) / 1024:.0f} "
            f"MiB each, over their start, numba's load included); with the reader's own: +{total / 1024:.0f} MiB "
            f"= {total * 1024 / size:.1f}x the file (goal <= 4x)"
        )


def selective(peer: Path, path: Path, rounds: int) -> dict:
    size = path.stat().st_size
    o, g = [], []
    for _ in range(rounds):
        o.append(ours(path, 1, SELECTIVE)[0])
        g.append(go(peer, path, 1, SELECTIVE)[0])
    oc, gc = [r["cpu"] for r in o], [r["cpu"] for r in g]
    span = (o[0]["last_ns"] - o[0]["first_ns"]) / 1e9
    what = f"STW, GC and GOMAXPROCS only, {size / 1e6:.0f} MB / {span:.0f} s trace"
    ROWS.append((f"{what}: CPU", cell(oc), cell(gc), ratio(oc, gc).replace("x", "×")))
    ROWS.append(
        (
            "same: peak memory (numba included)",
            f"{max(r['peak_kib'] for r in o) / 1024:.0f} MiB",
            f"{max(r['peak_kib'] for r in g) / 1024:.0f} MiB",
            "",
        )
    )
    print(
        f"== {'/'.join(SELECTIVE)} only: {path.name}, {size / 1e6:.0f} MB, {o[0]['generations']} generations, "
        f"{o[0]['stw']} STW, {o[0]['gc']} GC cycles (peer: {g[0]['stw']}, {g[0]['gc']}), {rounds} rounds"
    )
    print(
        f"  ours CPU {med(oc)} wall {med([r['wall'] for r in o])} | Go CPU {med(gc)} "
        f"wall {med([r['wall'] for r in g])} | ours/Go CPU {ratio(oc, gc)} (goal <= 0.5x)"
    )
    print(
        f"  peak memory: ours +{max(r['peak_kib'] for r in o) / 1024:.0f} MiB (goal <= 300 MB; numba's runtime "
        "included); "
        f"Go {max(r['peak_kib'] for r in g) / 1024:.0f} MiB"
    )
    return o[0]


def window(path: Path, info: dict, rounds: int) -> None:
    mid = (info["first_ns"] + info["last_ns"]) // 2
    win = (mid, mid + 1_000_000_000)
    w, f = [], []
    for _ in range(rounds):
        w.append(ours(path, 1, None, win)[0])
        f.append(ours(path, 1)[0])
    span = (info["last_ns"] - info["first_ns"]) / 1e9
    fw = [r["wall"] for r in f]
    ROWS.append(
        (
            "a 1 s window of that trace: wall",
            f"{cell([r['wall'] for r in w])}, {w[0]['decoded']} of {info['generations']} generations decoded",
            f"(full read of ours: {statistics.median(fw):.1f} s, {max(r['peak_kib'] for r in f) / 2**20:.1f} GiB)",
            f"{statistics.median(fw) / statistics.median([r['wall'] for r in w]):.0f}× faster",
        )
    )
    print(f"== 1 s window of {path.name} ({span:.0f} s, {info['generations']} generations), {rounds} rounds")
    print(
        f"  window: {med([r['wall'] for r in w])} wall, {w[0]['decoded']} generations decoded, "
        f"{w[0]['running']:,} running intervals | full read: {med([r['wall'] for r in f])} wall, "
        f"peak +{max(r['peak_kib'] for r in f) / 1024:.0f} MiB | "
        f"{statistics.median([r['wall'] for r in f]) / statistics.median([r['wall'] for r in w]):.0f}x faster "
        "(goal >= 10x)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", default=ROOT / "benchmarks" / "data" / "http-server.trace", type=Path)
    ap.add_argument("big", nargs="?", default=ROOT / "benchmarks" / "data" / "http-server-big.trace", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peer", type=Path, help="a built gmp-tracepeer (default: build the collectors)")
    ap.add_argument("--full-only", action="store_true", help="the full read alone")
    ap.add_argument(
        "--workers",
        type=lambda v: [int(x) for x in v.split(",")],
        help="also time the full read by this many processes, or each of several (16,8,4) (default: as many as "
        "read_trace starts by itself, one per CPU where there are at least 4)",
    )
    ap.add_argument("--markdown", type=Path, help="also write the figures as a Markdown table here")
    a = ap.parse_args()
    from machine import describe

    print(describe())
    peer = a.peer or ensure_binaries()["gmp-tracepeer"]
    if not a.trace.exists():
        print(f"{a.trace} missing: record it with benchmarks/make_big_trace.py", file=sys.stderr)
        return 2
    full_read(peer, a.trace, a.rounds)
    for workers in a.workers if a.workers is not None else [parallel.workers()]:
        if workers > 1:
            full_read(peer, a.trace, a.rounds, workers)
    if not a.full_only and a.big.exists():
        info = selective(peer, a.big, a.rounds)
        window(a.big, info, a.rounds)
    elif not a.full_only:
        print(f"{a.big} missing: record it with benchmarks/make_big_trace.py {a.big} 380", file=sys.stderr)
    if a.markdown:
        a.markdown.write_text(markdown(describe().removeprefix("machine: "), a.rounds))
        print(f"wrote {a.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
