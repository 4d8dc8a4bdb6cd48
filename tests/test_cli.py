"""The gmpanalysis command."""

from __future__ import annotations

import subprocess
import sys

from conftest import RUNS

from gmpanalysis.cli import main


def test_summary_defaults_to_shipped_fixtures(capsys):
    assert main(["summary"]) == 0
    out = capsys.readouterr().out
    for p in RUNS:
        assert p.name in out
    assert "cpus_throttled_p50" in out and "throughput_rps" in out and "exhausted_p50_ms" in out


def test_summary_bad_bundle_is_a_clear_error(tmp_path, capsys):
    assert main(["summary", str(tmp_path)]) == 2
    assert "meta.json: missing" in capsys.readouterr().err


def test_console_script_runs():
    r = subprocess.run([sys.executable, "-m", "gmpanalysis.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "lab" in r.stdout and "summary" in r.stdout


def test_lab_run_refuses_bad_limit(capsys):
    assert main(["lab", "run", "--cpu-limit", "half", "-o", "/nonexistent/x"]) == 2
    assert "cpu limit 'half'" in capsys.readouterr().err


def test_trace_says_what_running_means_and_gives_gc_cpu(capsys):
    alloc = next(p for p in RUNS if p.name.startswith("alloc"))
    assert main(["trace", str(alloc / "trace.out")]) == 0
    out = capsys.readouterr().out
    assert "goroutine running time per P (wall time on the P" in out
    assert "frozen by a CPU quota (CFS throttling)" in out
    line = next(x for x in out.splitlines() if x.startswith("GC CPU: "))
    pct = float(line.split()[2])
    assert 5 < pct < 15  # whole assist ranges read about twice that
    assert "mark assists on a P" in line and "parked time included" in out
