"""gmpanalysis as a user meets it: built into a wheel and an sdist, each installed into a fresh
virtualenv outside the checkout, then used from there: the main job on the bundled example
runs, a notebook, and a real lab run with collectors built from the Go sources the package
carries.

Marked lab: it builds the distributions, installs each with its [notebooks] extra into a new
virtualenv (the dependencies come from PyPI, through pip's cache: a minute or two per install
on a fresh machine), builds the collectors with the local Go toolchain, and records a real
run under a real CPU quota (root, a cpu cgroup controller, Go).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO, lab_unavailable_reason

from gmpanalysis.errors import LabError
from gmpanalysis.lab import binaries

pytestmark = pytest.mark.lab

# the runs the wheel carries (hatch_build.py owns the list; the notebooks use these)
EXAMPLES = ("alloc-0.5cpu-gmp8", "cpu-0.5cpu-gmp1", "cpu-0.5cpu-gmp2", "cpu-0.5cpu-gmp8")
# every variable that would point the installed package back at the checkout's data or code
CHECKOUT_POINTERS = ("GMP_DATA", "GMP_COLLECTORS", "GMP_BIN_DIR", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """The wheel (built from the checkout) and the sdist, built once."""
    out = tmp_path_factory.mktemp("dist")
    # --sdist --wheel builds both from the checkout; installing the sdist below then
    # exercises the other path, a wheel built from the sdist
    _run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(REPO)], cwd=out, timeout=900)
    (wheel,) = out.glob("gmpanalysis-*.whl")
    (sdist,) = out.glob("gmpanalysis-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


@dataclass
class Installed:
    kind: str  # wheel or sdist
    venv: Path
    work: Path  # the working directory of every command: outside the checkout
    cache: Path  # XDG_CACHE_HOME: examples unpacked and collectors built here, fresh per install
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return _run([str(self.venv / "bin" / args[0]), *args[1:]], cwd=self.work, env=self.env, timeout=timeout)


@pytest.fixture(scope="module", params=["wheel", "sdist"])
def installed(request, dists, tmp_path_factory) -> Installed:
    kind = request.param
    root = tmp_path_factory.mktemp(f"user-{kind}")
    assert not root.resolve().is_relative_to(REPO)
    venv, work, cache = root / "venv", root / "work", root / "cache"
    work.mkdir()
    base = {k: v for k, v in os.environ.items() if k not in CHECKOUT_POINTERS}
    _run([sys.executable, "-m", "venv", str(venv)], cwd=work, env=base, timeout=300)
    # pip's own cache (under the user's cache directory) is kept: a fresh machine downloads
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off"]
        + [f"{dists[kind]}[notebooks]"],
        cwd=work,
        env=base,
        timeout=1200,
    )
    env = dict(base, PATH=f"{venv / 'bin'}{os.pathsep}{base.get('PATH', '')}", XDG_CACHE_HOME=str(cache))
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if os.access(go, os.X_OK):
        # Go's compile cache would move under the fresh XDG_CACHE_HOME too; it is keyed by
        # content, so sharing the user's only saves compile time
        gocache = subprocess.run([go, "env", "GOCACHE"], capture_output=True, text=True, timeout=60).stdout.strip()
        if gocache:
            env["GOCACHE"] = gocache
    return Installed(kind, venv, work, cache, env)


def test_the_distributions_carry_what_an_install_needs(dists):
    with zipfile.ZipFile(dists["wheel"]) as whl:
        names = whl.namelist()
        examples = zipfile.ZipFile(io.BytesIO(whl.read("gmpanalysis/examples.zip")))
    # the examples are the four fixture bundles, byte for byte, in a reproducible zip
    members = examples.infolist()
    assert [m.filename for m in members] == sorted(m.filename for m in members)
    assert {m.filename.split("/")[0] for m in members} == set(EXAMPLES)
    for m in members:
        assert m.compress_type == zipfile.ZIP_LZMA and m.date_time == (1980, 1, 1, 0, 0, 0), m.filename
        assert examples.read(m) == (FIXTURES / "runs" / m.filename).read_bytes(), m.filename
    for name in EXAMPLES:
        expected = {f"{name}/{p.name}" for p in (FIXTURES / "runs" / name).iterdir() if p.is_file()}
        assert expected <= {m.filename for m in members}
    # the collectors' sources: every module's go.mod and the commands, no tests, no binaries
    collectors = [n.removeprefix("gmpanalysis/_collectors/") for n in names if n.startswith("gmpanalysis/_collectors/")]
    for need in ("go.mod", "go.sum", "cmd/gmp-sampler/main.go", "demoapp/go.mod", "variants/go124/go.mod"):
        assert need in collectors
    unneeded = [
        n for n in collectors if n.endswith("_test.go") or "testdata/" in n or n.startswith(("bin/", "deploy/"))
    ]
    assert not unneeded
    # ... the same files the build cache hashes, so its key covers all the wheel carries
    src = REPO / "collectors"
    assert sorted(collectors) == sorted(p.relative_to(src).as_posix() for p in binaries.build_input_paths(src))
    assert not [n for n in names if "__pycache__" in n or n.startswith(("tests/", "fixtures/"))]

    with tarfile.open(dists["sdist"]) as tar:
        files = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    for need in ("pyproject.toml", "hatch_build.py", "README.md", "collectors/go.mod", "gmpanalysis/examples.py"):
        assert need in files
    assert {f.split("/")[2] for f in files if f.startswith("fixtures/runs/")} == set(EXAMPLES)
    assert not [f for f in files if f.startswith((".venv/", "tests/", "notebooks/", "fixtures/traces/", ".git/"))]
    assert dists["sdist"].stat().st_size < 1_500_000


def test_the_installed_package_imports_from_its_virtualenv(installed):
    r = installed.run(
        "python",
        "-c",
        "import gmpanalysis as gmp, gmpanalysis.lab.binaries as b\n"
        "print(gmp.__file__); print(b.collectors_dir()); print(gmp.example_dir())",
    )
    module, collectors, examples = (Path(line) for line in r.stdout.split())
    for p in (module, collectors):
        assert p.is_relative_to(installed.venv) and not p.is_relative_to(REPO), p
    assert examples.is_relative_to(installed.cache), examples  # unpacked from examples.zip


def test_the_main_job_runs_on_the_bundled_examples(installed):
    r = installed.run("gmpanalysis", "summary")
    header = r.stdout.splitlines()[0].split()
    assert header[0] == "name" and sorted(header[1:]) == sorted(EXAMPLES), r.stdout[:500]
    installed.run("gmpanalysis", "report", "-o", "report.html", timeout=600)
    html = (installed.work / "report.html").read_text()
    assert all(name in html for name in EXAMPLES) and len(html) > 100_000


def test_a_notebook_executes_against_the_installed_package(installed):
    nb = json.loads((REPO / "notebooks" / "01-quickstart.ipynb").read_text())
    # one cell more, at the end, reports which gmpanalysis the kernel imported
    nb["cells"].append(
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "import gmpanalysis\nprint(gmpanalysis.__file__)",
        }
    )
    (installed.work / "quickstart.ipynb").write_text(json.dumps(nb))
    installed.run(
        "jupyter",
        "nbconvert",
        "--to",
        "notebook",
        "--execute",
        "--ExecutePreprocessor.timeout=600",
        "--output",
        "executed.ipynb",
        "quickstart.ipynb",
        timeout=900,
    )
    done = json.loads((installed.work / "executed.ipynb").read_text())
    outputs = [o for c in done["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the notebook drew no figure"
    imported = Path("".join(done["cells"][-1]["outputs"][0]["text"]).strip())
    assert imported.is_relative_to(installed.venv), imported


def test_a_lab_run_from_the_installed_package(installed):
    reason = lab_unavailable_reason()
    if reason:
        pytest.skip(reason)
    out = installed.work / "r"
    r = installed.run(
        "gmpanalysis",
        "lab",
        "run",
        "--cpu-limit",
        "500m",
        "--gomaxprocs",
        "2",
        "--duration",
        "3",
        "--trace-start",
        "0.5",
        "--trace-seconds",
        "2",
        "-o",
        str(out),
        timeout=900,
    )
    # the collectors were built from the package's own sources into the user's cache
    packaged = installed.venv / "lib"
    assert f"building the collectors from {packaged}" in r.stderr, r.stderr[-2000:]
    assert str(installed.cache / "gmpanalysis" / "bin") in r.stderr
    assert (out / "meta.json").is_file() and (out / "trace.out").stat().st_size > 0
    s = installed.run("gmpanalysis", "summary", str(out))
    rows = {line.split()[0]: line.split()[1:] for line in s.stdout.splitlines() if line.strip()}
    assert rows["gomaxprocs"] == ["2"] and rows["quota_us"] == ["50000"], s.stdout
    assert int(rows["periods"][0]) >= 20, s.stdout  # ~30 CFS periods of 100 ms in 3 s


def test_the_collectors_source_is_the_checkout_first_then_the_package(monkeypatch, tmp_path):
    for var in ("GMP_COLLECTORS", "GMP_BIN_DIR"):
        monkeypatch.delenv(var, raising=False)
    packaged = tmp_path / "site-packages" / "gmpanalysis" / "_collectors"
    packaged.mkdir(parents=True)
    (packaged / "go.mod").write_text((REPO / "collectors" / "go.mod").read_text())
    monkeypatch.setattr(binaries, "PACKAGED_SOURCE", packaged)
    monkeypatch.setattr(binaries, "CHECKOUT_SOURCE", REPO / "collectors")
    assert binaries.collectors_dir() == REPO / "collectors"
    monkeypatch.setattr(binaries, "CHECKOUT_SOURCE", tmp_path / "no-checkout")
    assert binaries.collectors_dir() == packaged
    (packaged / "go.mod").unlink()
    assert binaries.collectors_dir() is None


def test_without_go_the_error_says_what_to_install(monkeypatch):
    for var in ("GMP_COLLECTORS", "GMP_BIN_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(binaries, "find_go", lambda: None)
    with pytest.raises(LabError) as e:
        binaries.ensure_binaries()
    go_line = binaries.required_go(REPO / "collectors")
    assert go_line.startswith("1.") and f"install Go >= {go_line}" in str(e.value)
    assert "GMP_BIN_DIR" in str(e.value)


def test_the_build_cache_is_keyed_by_source_and_go_version():
    src = REPO / "collectors"
    assert binaries.source_hash(src, "go1.26.8") == binaries.source_hash(src, "go1.26.8")
    assert binaries.source_hash(src, "go1.26.8") != binaries.source_hash(src, "go1.27.0")
