"""The Python examples of README.md and of the documentation's pages (docs/**/*.md) run as
pasted, from the top of a checkout (the way a reader tries them): every ```python block of a
file, in order, in one namespace per file."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), flags=re.S | re.M)


WITH_EXAMPLES = [p for p in PAGES if blocks(p)]


def test_there_are_examples():
    names = {p.relative_to(REPO).as_posix() for p in WITH_EXAMPLES}
    # the README's own example, and the pages that walk through the API
    assert {"README.md", "docs/tutorial.md", "docs/traces.md", "docs/whatif.md"} <= names


@pytest.mark.parametrize("path", WITH_EXAMPLES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_examples_run_as_pasted(path, monkeypatch):
    monkeypatch.chdir(REPO)
    ns: dict = {}
    name = path.relative_to(REPO).as_posix()
    for i, code in enumerate(blocks(path), 1):
        code_only = "\n".join(line.split("#")[0] for line in code.splitlines())
        assert "..." not in code_only, f"{name}: block {i} holds a placeholder a reader cannot paste"
        exec(compile(code, f"{name} python block {i}", "exec"), ns)


def test_the_readme_s_validation_table_is_the_benchmark_s():
    """The README shows the what-if's per-regime table between marks that
    benchmarks/validate_whatif.py --markdown rewrites along with the table's own file: the
    two say the same."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from validate_whatif import README_MARKS, readme_body

    start, end = README_MARKS
    shown = (REPO / "README.md").read_text().split(start, 1)[1].split(end, 1)[0].strip()
    table = (REPO / "docs" / "benchmarks" / "results" / "whatif-regimes.md").read_text()
    assert shown and shown == readme_body(table)
