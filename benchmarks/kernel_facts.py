"""Kernel facts measured from lab bundles (default: fixtures/runs-v2 and the 16-CPU v2 runs
beside the checkout): per bundle, the kernel, each level's period-timer phase (ms mod the
period), and, where the kernel gives PSI, the container's psi_full_us over its frozen wall
time (frozen_us) in throttled periods (median) and cpu.stat.local's throttled time against
cpu.stat's. The kernel-facts table of docs/kernels.md quotes its output.

    .venv/bin/python benchmarks/kernel_facts.py [--out PATH] [BUNDLE ...]

``--out docs/benchmarks/results/kernel-facts.txt`` also writes the lines to the file that
page shows beside its table.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

import gmpanalysis as gmp

REPO = Path(__file__).resolve().parents[1]


def facts(path: Path) -> str:
    run = gmp.load_run(path)
    m = run.meta
    P = (m.get("period_us") or 100_000) * 1000
    levels = [x["level"] for x in m.get("levels") or [{"level": None}]]
    phases = []
    for lv in levels:
        g = gmp.df_periods(run, level=lv).attrs["grid"] if lv else gmp.df_periods(run).attrs["grid"]
        phases.append(f"{lv or 'cgroup'} {g.segments[0].phase_ns % P / 1e6:.2f}")
    out = f"{path.name}: {m.get('kernel')} v{m.get('cgroup_version')} {m.get('virtualization')}; phase ms " + ", ".join(
        phases
    )
    per = gmp.df_periods(run)
    thr = per[per["throttled"].fillna(False).astype(bool) & (per["frozen_us"] > 0)]
    if per["psi_full_us"].notna().any() and len(thr):
        out += f"; psi_full/frozen median {np.median(thr['psi_full_us'] / thr['frozen_us']):.2f} ({len(thr)} periods)"
    s = run.samples
    if "local_throttled_us" in s and s["local_throttled_us"].notna().any():
        x = s[s["cgroup"] == levels[0]] if "cgroup" in s else s
        loc = float(x["local_throttled_us"].iloc[-1] - x["local_throttled_us"].iloc[0])
        own = float(x["throttled_us"].iloc[-1] - x["throttled_us"].iloc[0])
        out += f"; cpu.stat.local/cpu.stat throttled {loc / own:.2f}" if own else ""
    return out


def main(argv: list[str]) -> int:
    out = None
    if argv[:1] == ["--out"] and len(argv) > 1:
        out, argv = Path(argv[1]), argv[2:]
    paths = [Path(a) for a in argv] or sorted(
        p
        for d in (REPO / "fixtures" / "runs-v2", REPO.parent / "shared" / "data" / "16cpu-v2")
        if d.is_dir()
        for p in d.iterdir()
        if (p / "meta.json").exists()
    )
    warnings.simplefilter("ignore")
    lines = []
    for p in paths:
        lines.append(facts(p))
        print(lines[-1], flush=True)
    if out:
        out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
