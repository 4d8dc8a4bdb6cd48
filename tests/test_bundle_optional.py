"""Optional files of a bundle: an empty one (0 bytes, its writer had not written its header
yet) is taken as absent, with a note; the analysis goes on."""

from __future__ import annotations

import shutil
from pathlib import Path

import gmpanalysis as gmp


def test_empty_optional_files_are_absent_with_a_note(tmp_path):
    d = tmp_path / "b"
    shutil.copytree(Path("fixtures/runs/cpu-0.5cpu-gmp1"), d)
    for f in ("requests.csv", "limits.csv", "host_stat.csv"):
        (d / f).write_bytes(b"")
    run = gmp.load_run(d)
    assert run.requests is None and run.limits is None and run.host_stat is None
    for f in ("requests.csv", "limits.csv", "host_stat.csv"):
        assert any(n.startswith(f"{d / f}: empty") for n in run.notes), run.notes
    assert gmp.period_summary(gmp.df_periods(run))["throttled_periods"] > 0
