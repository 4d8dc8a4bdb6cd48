"""The documentation site builds with every warning an error (mkdocs build --strict), and
what it generates is there: every public name on the API page, every meta.json field of the
schema and every CSV column on the bundle page, every subcommand's help on the command-line
page, and no marker of docs/hooks/gmpdocs.py left unreplaced."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

import gmpanalysis as gmp
from gmpanalysis import bundlefiles

MKDOCS = Path(sys.executable).with_name("mkdocs")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if not MKDOCS.exists():
        pytest.fail(f"{MKDOCS} missing: the docs extra is not installed (bash scripts/setup.sh installs it)")
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [str(MKDOCS), "build", "--strict", "-q", "-f", str(REPO / "mkdocs.yml"), "-d", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}\n{r.stderr}"
    return out


def text(site: Path, page: str) -> str:
    return (site / page / "index.html").read_text()


def test_every_public_name_is_on_the_api_page(site):
    src = (REPO / "docs" / "api.md").read_text()
    missing = [n for n in gmp.__all__ if f"::: gmpanalysis.{n}" not in src]
    assert not missing, f"add to docs/api.md: {missing}"
    html = text(site, "api")
    for n in gmp.__all__:
        assert f'id="gmpanalysis.{n}"' in html, n


def test_the_bundle_page_holds_the_schema(site):
    html = text(site, "bundle")
    schema = json.loads((REPO / "gmpanalysis" / "bundle-meta.schema.json").read_text())
    for field in schema["properties"]:
        assert f"<code>{field}</code>" in html, field
    for columns in (
        bundlefiles.CPU_STAT_COLUMNS,
        bundlefiles.CPU_STAT_NULLABLE,
        bundlefiles.LIMITS_COLUMNS,
        bundlefiles.LIMITS_NULLABLE,
        bundlefiles.REQUEST_COLUMNS,
        bundlefiles.REQUEST_NULLABLE,
        bundlefiles.HOST_STAT_COLUMNS,
    ):
        for col in columns:
            assert f"<code>{col}</code>" in html, col


def test_the_cli_page_holds_every_subcommand(site):
    from gmpanalysis.cli import build_parser

    html = text(site, "cli")
    names = re.findall(r"\{([a-z,]+)\}", build_parser().format_usage())[0].split(",")
    for name in names:
        assert f"<code>gmpanalysis {name}</code>" in html, name


def test_no_marker_is_left(site):
    for page in site.rglob("*.html"):
        assert "<!-- gmp:" not in page.read_text(), page


def test_every_results_file_is_shown(site):
    """A benchmark's result file that no page includes would be refreshed for nothing."""
    pages = "".join(p.read_text() for p in (REPO / "docs").rglob("*.md"))
    for f in (REPO / "docs" / "benchmarks" / "results").iterdir():
        assert re.search(rf"<!-- gmp:(results|text) [^>]*\b{re.escape(f.name)}\b", pages), f.name
