"""Go's own edge-case corpus ($GOROOT/src/internal/trace/testdata/tests/*.test: syscall
steals across generations, confusing sequence numbers, sync batches...), converted from
text to binary by go_text_trace.py and read by both our reader and x/exp/trace."""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

import pytest
from go_text_trace import load_case
from oracle import assert_matches, oracle

import gmpanalysis as gmp
from gmpanalysis.gotrace import ClockWarning, read_trace
from gmpanalysis.lab.binaries import find_go


def corpus() -> list[Path]:
    go = find_go()
    if go is None:
        return []
    root = subprocess.run([go, "env", "GOROOT"], capture_output=True, text=True).stdout.strip()
    return sorted(Path(root, "src", "internal", "trace", "testdata", "tests").glob("*.test"))


CASES = corpus()
pytestmark = pytest.mark.skipif(not CASES, reason="needs the Go toolchain's source tree (GOROOT/src/internal/trace)")


def test_corpus_is_there():
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_case(bins, tmp_path, case):
    expect, data, mismatches = load_case(case)
    path = tmp_path / "t.trace"
    path.write_bytes(data)
    o = oracle(bins, path)
    if expect == "SUCCESS":
        assert mismatches == [], "the converter must reproduce every batch size the corpus states"
        assert not o.get("error"), o.get("error")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            # the sync cases use a made-up 1 GHz clock on purpose
            warnings.simplefilter("ignore", ClockWarning)
            assert_matches(read_trace(data), o)
    else:
        # x/exp validates the partial order of events and rejects these; we do not validate
        # ordering, but must neither crash nor hang: tables, or a TraceFormatError
        assert expect.startswith("FAILURE") and o.get("error")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                read_trace(data)
            except gmp.TraceFormatError:
                pass
