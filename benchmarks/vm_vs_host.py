"""How far a TCG guest can be trusted: the same lab configuration on this host (its own
kernel, cgroup v1) and in a VM of another kernel (cgroup v2) with as many vCPUs as the host
has cores and with twice as many, side by side.

Per run it prints what the period table says (throttled share of active periods, when in
the period the quota ran out, CPUs throttled at once, stall, CPU per active period,
throughput), how well the sampler kept its 1 ms ticks (wake-up lateness p99, missed ticks),
and what the guest's clock does while a vCPU thread is descheduled: TCG guests get no steal
time, so the time a vCPU's host thread waits for a core is run time to the guest. The guest's
busy CPUs (its /proc/stat, host_stat.csv) against this host's cores shows it: above the
host's cores, the guest counted time that nothing ran. The qemu process's own CPU time comes
from wait4's rusage of the lab command (qemu is its child).

    .venv/bin/python benchmarks/vm_vs_host.py [--kernel 6.12] [--repeat 2] [-o DIR] [--markdown PATH]

``--markdown docs/benchmarks/results/vm-vs-host.md`` rewrites the table of the lab page.

Runs one lab or VM experiment at a time (needs root; the VM lab's packages: scripts/test.sh).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

import gmpanalysis as gmp

REPO = Path(__file__).resolve().parents[1]
LOAD = [
    "--cpu-limit", "500m", "--parent-cpu-limit", "500m",
    "--workload", "cpu", "--work-ms", "30", "--rate", "8", "--arrivals", "poisson",
    "--duration", "4", "--trace-start", "1", "--trace-seconds", "2",
]  # fmt: skip


def run_one(out: Path, extra: list[str], gomaxprocs: int, seed: int) -> tuple[Path, float]:
    """One lab run; returns the bundle and the CPU seconds the command and its children used."""
    exe = REPO / ".venv" / "bin" / "gmpanalysis"
    cmd = [str(exe), "lab", "run", *LOAD, "--gomaxprocs", str(gomaxprocs), "--seed", str(seed)]
    cmd += [*extra, "--name", out.name, "-o", str(out)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read() if p.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return out, ru.ru_utime + ru.ru_stime


def row(where: str, path: Path, cpu_s: float) -> dict[str, object]:
    run = gmp.load_run(path)
    m = run.meta
    c = gmp.compare_runs([run]).iloc[0]
    s = m.get("sampler") or {}
    h = pd.read_csv(path / "host_stat.csv")
    dt_s = (h["t_ns"].iloc[-1] - h["t_ns"].iloc[0]) / 1e9
    busy = h["cpu_total_us"] - h["idle_us"] - h["iowait_us"]
    guest_busy = float(busy.iloc[-1] - busy.iloc[0]) / 1e6 / dt_s if dt_s > 0 else np.nan
    return {
        "where": where,
        "kernel": m.get("kernel", "")[:12],
        "ncpu": m.get("ncpu"),
        "gmp": int(c["gomaxprocs"]),
        "thr_%act": round(float(c["throttled_pct_active"]), 1),
        "exh_p50_ms": round(float(c["exhausted_p50_ms"]), 1),
        "cpus_thr": round(float(c["cpus_throttled_p50"]), 2),
        "stall_ms/s": round(float(c["stall_ms_per_s"]), 1),
        "use_ms/act": round(float(c["usage_ms_per_active"]), 1),
        "rps": round(float(c["throughput_rps"]), 2),
        "late_p99_ms": round(s.get("lateness_p99_ns", np.nan) / 1e6, 2),
        "missed_%": round(100 * s.get("missed_ticks", 0) / max(1, s.get("ticks", 0) + s.get("missed_ticks", 0)), 1),
        "busy_cpus": round(guest_busy, 2),
        "host_cores": os.cpu_count(),
        "cmd_cpu_s": round(cpu_s, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", default="6.12")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--gomaxprocs", default="2,8")
    ap.add_argument("-o", "--out", type=Path, default=None)
    ap.add_argument("--from", dest="again", type=Path, default=None, help="summarise the bundles of an earlier run")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the summary as a Markdown table here")
    a = ap.parse_args()
    if a.again:
        rows = [row(p.name.rsplit("-gmp", 1)[0].replace("-", " "), p, np.nan) for p in sorted(a.again.iterdir())]
        summarise(pd.DataFrame(rows), a.markdown)
        return
    out = a.out or Path(tempfile.mkdtemp(prefix="gmp-vm-vs-host-"))
    cores = os.cpu_count() or 2
    where = {
        "host": [],
        f"vm {cores} vCPU": ["--kernel", a.kernel, "--cpus", str(cores)],
        f"vm {2 * cores} vCPU": ["--kernel", a.kernel, "--cpus", str(2 * cores)],
    }
    rows = []
    for rep in range(a.repeat):
        for g in (int(x) for x in a.gomaxprocs.split(",")):
            for w, extra in where.items():  # interleaved: the machine's other load hits all alike
                name = f"{w.replace(' ', '-')}-gmp{g}-r{rep}"
                path, cpu = run_one(out / name, extra, g, seed=1 + rep)
                rows.append(row(w, path, cpu))
                print(pd.DataFrame([rows[-1]]).to_string(index=False, header=len(rows) == 1), flush=True)
    summarise(pd.DataFrame(rows), a.markdown)
    print(f"bundles in {out}")


def summarise(df: pd.DataFrame, markdown: Path | None = None) -> None:
    print("\nmedian (min-max) over repeats:")
    num = [c for c in df.columns if c not in ("where", "kernel", "ncpu", "gmp", "host_cores")]
    for (w, g), grp in df.groupby(["where", "gmp"], sort=False):
        cells = [f"{c} {grp[c].median():g} ({grp[c].min():g}-{grp[c].max():g})" for c in num]
        print(f"{w:>12} gmp {g}: " + ", ".join(cells))
    if markdown:
        markdown.write_text(table(df))
        print(f"wrote {markdown}")


def table(df: pd.DataFrame) -> str:
    """The summary as the lab page shows it: per place and GOMAXPROCS, median (min–max)."""

    def spread(x: pd.Series, fmt: str) -> str:
        return f"{x.median():{fmt}} ({x.min():{fmt}}–{x.max():{fmt}})"

    lines = [
        "<!-- rewritten by: .venv/bin/python benchmarks/vm_vs_host.py --markdown PATH -->",
        f"<!-- {len(df)} runs; median (min–max) over the rounds -->",
        "",
        "| where | GOMAXPROCS | throttled % of active periods | exhaustion p50 ms | CPUs throttled | stall ms/s "
        "| CPU ms per active period | req/s | sampler p99 ms, missed ticks |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (gmp_, where), x in df.groupby(["gmp", "where"], sort=False):
        cells = [
            spread(x["thr_%act"], ".0f"),
            spread(x["exh_p50_ms"], ".0f"),
            spread(x["cpus_thr"], ".1f"),
            spread(x["stall_ms/s"], ".0f"),
            spread(x["use_ms/act"], ".0f"),
            f"{x['rps'].median():.1f}",
            f"{x['late_p99_ms'].median():.2g}, {x['missed_%'].median():.0f} %",
        ]
        lines.append(f"| {where} | {gmp_} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
