"""The gmpanalysis command."""

from __future__ import annotations

import subprocess
import sys

import pytest
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


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gmpanalysis.cli", *args], capture_output=True, text=True, **kw)


def test_a_reader_that_goes_away_ends_it_quietly():
    # `gmpanalysis trace FILE | head -1`: the pipe closes after the first line
    alloc = next(p for p in RUNS if p.name.startswith("alloc"))
    p = subprocess.Popen(
        [sys.executable, "-m", "gmpanalysis.cli", "trace", str(alloc / "trace.out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    rc = p.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert rc in (0, 141)  # 0 when every line fitted in the pipe before it closed


def test_a_cut_trace_warns_in_words_not_with_a_source_line(tmp_path):
    alloc = next(p for p in RUNS if p.name.startswith("alloc"))
    cut = tmp_path / "cut.out"
    cut.write_bytes((alloc / "trace.out").read_bytes()[:30_000])
    r = _cli("trace", str(cut))
    assert r.returncode == 0
    warn = [line for line in r.stderr.splitlines() if line]
    assert warn and all(line.startswith("gmpanalysis: warning: ") for line in warn), r.stderr
    assert "cli.py" not in r.stderr and str(cut) in r.stderr and "offset" in r.stderr


def test_subcommand_help_says_the_default_input():
    for cmd in ("summary", "report"):
        r = _cli(cmd, "--help")
        assert r.returncode == 0 and "example runs" in r.stdout and "GMP_DATA" in r.stdout


def test_missing_inputs_are_not_found_errors(tmp_path, capsys):
    assert main(["trace", str(tmp_path / "nope.out")]) == 2
    assert "nope.out: no such file" in capsys.readouterr().err
    assert main(["summary", str(tmp_path / "nope")]) == 2
    assert "nope: no such directory" in capsys.readouterr().err


def test_a_trace_that_cannot_be_read_costs_its_columns_not_the_command(tmp_path, capsys):
    """A damaged trace.out (bytes flipped across it): summary, report and advise go on
    without the trace, and say so on stderr and in the report's data notes."""
    import shutil

    d = tmp_path / "b"
    shutil.copytree("fixtures/runs/cpu-0.5cpu-gmp8", d)
    b = bytearray((d / "trace.out").read_bytes())
    for i in range(2000, len(b), 997):
        b[i] ^= 0xFF
    (d / "trace.out").write_bytes(bytes(b))
    out = tmp_path / "r.html"
    for argv in (["summary", str(d)], ["report", "-o", str(out), str(d)], ["advise", str(d)]):
        assert main(argv) == 0, argv
        err = capsys.readouterr().err
        assert "trace.out: cannot be used" in err and "analysed without the trace" in err, (argv, err)
    assert "analysed without the trace" in out.read_text()


def test_a_trace_of_another_run_costs_its_columns_not_the_command(tmp_path, capsys):
    """Another run's trace.out (hours apart): the library refuses it, the commands go on
    without it and say why."""
    import shutil

    import gmpanalysis as gmp

    d = tmp_path / "b"
    shutil.copytree("fixtures/runs/cpu-0.5cpu-gmp8", d)
    shutil.copy("fixtures/runs/nested-0.5cpu-pod0.5-gmp2/trace.out", d / "trace.out")
    with pytest.raises(gmp.ForeignTraceError, match="another run"):
        _ = gmp.load_run(d).trace
    for argv in (["summary", str(d)], ["advise", str(d)]):
        assert main(argv) == 0, argv
        err = capsys.readouterr().err
        assert "trace.out: cannot be used" in err and "another run" in err and "without the trace" in err, err


def test_a_directory_of_bundles_given_as_one_is_named_so(capsys):
    assert main(["summary", "fixtures/runs"]) == 2
    err = capsys.readouterr().err
    assert "fixtures/runs: a directory of" in err and "fixtures/runs/*" in err and "fleet" in err


def test_advise_prints_the_runs_notes(tmp_path, capsys):
    import shutil

    d = tmp_path / "b"
    shutil.copytree("fixtures/runs/cpu-0.5cpu-gmp8", d)
    (d / "host_stat.csv").write_bytes(b"")
    assert main(["advise", str(d)]) == 0
    assert "host_stat.csv: empty" in capsys.readouterr().err


def test_a_damaged_trace_is_told_apart_from_one_whose_path_ends_alike(tmp_path, capsys):
    """Two bundles run1 and x/run1, the second's trace damaged: only its trace is dropped
    (its path contains the first's: a substring match dropped the good one)."""
    import os
    import shutil

    for d in ("run1", "x/run1"):
        shutil.copytree("fixtures/runs/cpu-0.5cpu-gmp8", tmp_path / d)
    bad = tmp_path / "x/run1/trace.out"
    b = bytearray(bad.read_bytes())
    for i in range(2000, len(b), 997):
        b[i] ^= 0xFF
    bad.write_bytes(bytes(b))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["summary", "run1", "x/run1"]) == 0
    finally:
        os.chdir(cwd)
    cap = capsys.readouterr()
    dropped = [ln for ln in cap.err.splitlines() if "analysed without the trace" in ln]
    assert len(dropped) == 1 and dropped[0].startswith("x/run1: note: x/run1/trace.out"), cap.err
    stw = [ln for ln in cap.out.splitlines() if ln.startswith("stw_p50_us")][0].split()
    assert stw[1] != "–" and stw[2] == "–", stw  # "–": a value the runs cannot tell


def test_a_linked_data_file_is_not_written_over(tmp_path, capsys):
    import shutil

    d = tmp_path / "b"
    shutil.copytree("fixtures/runs/cpu-0.5cpu-gmp1", d)
    real = tmp_path / "real.csv"
    (d / "cpu_stat.csv").rename(real)
    (d / "cpu_stat.csv").symlink_to(real)
    before = real.read_bytes()
    assert main(["report", "-o", str(d / "cpu_stat.csv"), str(d)]) == 2
    assert "the data read" in capsys.readouterr().err and real.read_bytes() == before
