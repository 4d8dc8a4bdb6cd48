"""A bundle of a process nobody could ask (the node agent's, of a third-party binary):
meta.json has no Go version and no GOMAXPROCS; the trace tells both, and the analysis
reads them from it (the store also fills them in: tests/test_fleet.py)."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import gmpanalysis as gmp
from gmpanalysis.goversion import go_version_from_header, go_version_of

ROOT = Path(__file__).resolve().parents[1]


def test_the_trace_tells_what_meta_json_does_not(tmp_path):
    b = tmp_path / "agent-bundle"
    shutil.copytree(ROOT / "fixtures/runs/cpu-0.5cpu-gmp2", b)
    meta = json.loads((b / "meta.json").read_text())
    meta.update(go_version=None, gomaxprocs_effective=None)
    (b / "meta.json").write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = gmp.load_run(b)
    want = go_version_from_header(run.trace.meta["version"])  # "go1.26 or later" for this trace
    assert go_version_of(run) == want and want.startswith("go1.")
    g = gmp.df_gomaxprocs(run)
    assert g.attrs["go_version"] == want and int(g["gomaxprocs"].iloc[0]) == 2
    html = gmp.to_report(run, tmp_path / "r.html").read_text()
    assert f"{want}, kernel" in html and "None, kernel" not in html
