"""The shipped notebooks run top to bottom on the fixtures in a real Jupyter kernel, and
are committed without outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_there_are_four():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, path.name
    assert nb["cells"][0]["cell_type"] == "markdown"  # each opens saying what it shows


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_executes(path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="the [notebooks] extra is not installed")
    from nbclient import NotebookClient

    monkeypatch.setenv("GMP_DATA", str(FIXTURES))
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    # something was shown: tables or figures
    shown = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert shown, path.name
    if path.name.startswith(("01", "02", "03")):
        assert any("image/png" in o.get("data", {}) for o in shown), f"{path.name} drew no figure"
    assert os.environ["GMP_DATA"] == str(FIXTURES)


def test_notebook_text_points_at_the_data_variable():
    for p in NOTEBOOKS:
        assert "GMP_DATA" in Path(p).read_text()
