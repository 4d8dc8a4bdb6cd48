"""The README's Python examples run as pasted, from the top of a checkout (the way a reader
tries them): every ```python block, in order, in one namespace."""

from __future__ import annotations

import re

from conftest import REPO

BLOCKS = re.findall(r"^```python\n(.*?)^```", (REPO / "README.md").read_text(), flags=re.S | re.M)


def test_there_are_examples():
    assert BLOCKS


def test_examples_run_as_pasted(monkeypatch):
    monkeypatch.chdir(REPO)
    ns: dict = {}
    for i, code in enumerate(BLOCKS, 1):
        code_only = "\n".join(line.split("#")[0] for line in code.splitlines())
        assert "..." not in code_only, f"block {i} holds a placeholder a reader cannot paste"
        exec(compile(code, f"README.md python block {i}", "exec"), ns)
