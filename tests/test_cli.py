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
