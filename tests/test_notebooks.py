"""The shipped notebooks run top to bottom in a real Jupyter kernel, find their data through
``gmp.example_dir()`` (the example runs, or ``GMP_DATA``), and are committed without outputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def _params():
    # notebook 04 records a real lab run where root, cgroups and Go allow it
    return [pytest.param(p, id=p.stem, marks=[pytest.mark.lab] if p.name.startswith("04") else []) for p in NOTEBOOKS]


def _execute(path: Path, cwd: Path, cells: int | None = None):
    """Run the notebook (or its first ``cells`` cells) in a fresh kernel whose working directory
    is ``cwd``, so nothing it finds can come from the checkout's relative layout. Returns it."""
    nbformat = pytest.importorskip("nbformat", reason="the [notebooks] extra is not installed")
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if cells is not None:
        nb.cells = nb.cells[:cells]
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def _outputs(nb) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def _setup_cell(path: Path) -> int:
    """Index of the cell that sets RUNS (the notebook's set-up cell)."""
    nb = json.loads(path.read_text())
    i = next((i for i, c in enumerate(nb["cells"]) if "RUNS = gmp.example_dir()" in "".join(c["source"])), None)
    assert i is not None, f"{path.name}: no set-up cell with RUNS = gmp.example_dir()"
    return i


def test_there_are_five():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, path.name
    assert nb["cells"][0]["cell_type"] == "markdown"  # each opens saying what it shows


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_data_comes_from_example_dir(path):
    """One way to the data: the set-up cell asks gmp.example_dir(), no path is built by hand."""
    nb = json.loads(path.read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    setup = "".join(nb["cells"][_setup_cell(path)]["source"])
    assert "GMP_DATA" in setup  # the comment says how to point it elsewhere
    for hand_made in ("os.environ", "Path.cwd()", "fixtures", "DATA ="):
        assert hand_made not in code, f"{path.name} finds its data by hand ({hand_made!r})"


@pytest.mark.parametrize("path", _params())
def test_executes_with_the_example_runs(path, monkeypatch, tmp_path):
    """What a user meets: GMP_DATA unset, the kernel started outside the checkout."""
    monkeypatch.delenv("GMP_DATA", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # notebook 04 records its run in a temporary directory
    nb = _execute(path, tmp_path)
    shown = _outputs(nb)
    errors = [f"{o.ename}: {o.evalue}" for o in shown if o.output_type == "error"]
    assert not errors, errors
    assert shown, path.name
    # the set-up cell shows where the data came from: the checkout's example runs
    setup = nb.cells[_setup_cell(path)].outputs
    assert any(str(FIXTURES / "runs") in o.get("data", {}).get("text/plain", "") for o in setup), setup
    pngs = [o for o in shown if "image/png" in o.get("data", {})]
    if path.name.startswith(("01", "02", "03", "05")):
        assert pngs, f"{path.name} drew no figure"
    if path.name.startswith("04"):
        # where the lab can run (this test is marked lab), the run drawn is the one just recorded
        text = "".join(o.get("text", "") for o in shown if o.output_type == "stream")
        assert f"your run: {tmp_path}" in text, text
        # and it ends with that run drawn: the period plot and the heatmap are its last two cells
        last = [c for c in nb.cells if c.cell_type == "code"][-2:]
        assert all(any("image/png" in o.get("data", {}) for o in c.outputs) for c in last), "04 does not end drawn"


def test_gmp_data_is_honoured(monkeypatch, tmp_path):
    """GMP_DATA pointing at a directory holding only the run notebook 01 reads: it runs, and
    its set-up cell names that directory."""
    data = tmp_path / "my-data"
    shutil.copytree(FIXTURES / "runs" / "cpu-0.5cpu-gmp8", data / "cpu-0.5cpu-gmp8")
    monkeypatch.setenv("GMP_DATA", str(data))
    path = REPO / "notebooks" / "01-quickstart.ipynb"
    nb = _execute(path, tmp_path)
    assert not [o for o in _outputs(nb) if o.output_type == "error"]
    setup = nb.cells[_setup_cell(path)].outputs
    assert any(str(data) in o.get("data", {}).get("text/plain", "") for o in setup), setup


def test_gmp_data_without_runs_says_what_to_do(monkeypatch, tmp_path):
    """GMP_DATA pointing at an empty directory stops the notebook at its set-up cell with the
    MissingDataError that names the directory and the way out."""
    pytest.importorskip("nbclient", reason="the [notebooks] extra is not installed")
    from nbclient.exceptions import CellExecutionError

    path = REPO / "notebooks" / "01-quickstart.ipynb"

    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("GMP_DATA", str(empty))
    with pytest.raises(CellExecutionError) as e:
        _execute(path, tmp_path, cells=_setup_cell(path) + 1)
    assert "MissingDataError" in str(e.value)
    assert f"GMP_DATA={empty}: no run bundles there" in str(e.value)
    assert "unset GMP_DATA to use the example runs" in str(e.value)
