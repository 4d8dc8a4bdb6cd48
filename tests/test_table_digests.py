"""Every shipped run's public tables are what they were when tests/data/table_digests.json
was written (tests/table_digest.py): a refactor that moves any value fails here, naming the
run, the table and the column; a change meant to move them rewrites the file."""

from __future__ import annotations

import json

import pytest
from table_digest import GOLDEN, digests

EXPECTED = json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def now():
    return digests()


def test_the_same_runs_are_digested(now):
    assert sorted(now) == sorted(EXPECTED)


@pytest.mark.parametrize("run", sorted(EXPECTED))
def test_tables_unchanged(now, run):
    got, want = now.get(run), EXPECTED[run]
    if got == want:
        return
    diffs = []
    for table in sorted(set(want) | set(got or {})):
        a, b = want.get(table), (got or {}).get(table)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            cols = [c for c in sorted(set(a) | set(b)) if a.get(c) != b.get(c)]
            diffs += [f"{table}.{c}: {a.get(c)} -> {b.get(c)}" for c in cols]
        else:
            diffs.append(f"{table}: {a} -> {b}")
    pytest.fail(f"{run}: the tables moved (tests/table_digest.py --write if meant):\n" + "\n".join(diffs[:20]))
