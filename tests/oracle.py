"""Comparison with Go's own trace reader (x/exp/trace through gmp-tracedump).

x/exp/trace forces each event time to be later than the one before, finishing one
generation before the next; a time it moves becomes the previous event's time + 1 ns.
Raw Linux times are multiples of 64 ns, so gmp-tracedump marks a time as moved when it is
off the 64 ns grid or exactly 1 ns after the event before. Our reader keeps the raw wire
times: where x/exp moved nothing the two must be equal; where it moved a time, ours must be
earlier or equal (x/exp only ever moves times forward).
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from pathlib import Path


def oracle(bins: dict[str, Path], path: Path) -> dict:
    r = subprocess.run(
        [str(bins["gmp-tracedump"]), "--intervals", str(path)], capture_output=True, text=True, timeout=120
    )
    out = json.loads(r.stdout) if r.stdout.strip() else {"error": r.stderr}
    if r.returncode != 0 and not out.get("error"):
        out["error"] = r.stderr or f"exit {r.returncode}"
    return out


def same_time(ours: int, theirs: int, moved: bool | None = None) -> bool:
    if moved is None:
        moved = theirs % 64 != 0
    return ours <= theirs if moved else ours == theirs


def assert_matches(tr, o: dict) -> int:
    """Assert our tables agree with x/exp's summary; return the largest nudge seen (ns)."""
    worst = 0
    ours = list(tr.stw[["start_ns", "end_ns", "kind", "g"]].itertuples(index=False))
    theirs = sorted(o["stw"] or [], key=lambda x: x[0])
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for (a, b, k, g), (oa, ob, ok, og) in zip(ours, theirs, strict=True):
        assert (k, g) == (ok, og)
        assert same_time(a, oa) and same_time(b, ob), ((a, b), (oa, ob))
    gc = list(tr.gc[["start_ns", "end_ns"]].itertuples(index=False))
    assert len(gc) == len(o["gc"] or [])
    for (a, b), (oa, ob) in zip(gc, o["gc"] or [], strict=True):
        assert same_time(a, oa) and same_time(b, ob)
    gm = list(tr.gomaxprocs.itertuples(index=False))
    theirs_gm = o["gomaxprocs"] or []
    assert [v for _, v in gm] == [v for _, v in theirs_gm]
    assert all(same_time(t, ot) for (t, _), (ot, _) in zip(gm, theirs_gm, strict=True))
    mine, theirs_i = defaultdict(list), defaultdict(list)
    for g, p, a, b in tr.running[["g", "p", "start_ns", "end_ns"]].itertuples(index=False):
        mine[g].append((a, b, p))
    for g, p, a, b, f in o.get("intervals") or []:
        theirs_i[g].append((a, b, p, f))
    assert mine.keys() == theirs_i.keys()
    for g in mine:
        A, B = sorted(mine[g]), sorted(theirs_i[g])
        assert len(A) == len(B), g
        for (a, b, p), (oa, ob, op, f) in zip(A, B, strict=True):
            assert p == op and same_time(a, oa, bool(f & 1)) and same_time(b, ob, bool(f & 2)), (
                g,
                (a, b, p),
                (oa, ob, op, f),
            )
            worst = max(worst, oa - a, ob - b)
    # totals per P are exact wherever x/exp moved nothing
    if not any(f for *_, f in o.get("intervals") or []):
        tot = (tr.running.end_ns - tr.running.start_ns).groupby(tr.running.p).sum()
        assert {str(k): int(v) for k, v in tot.items() if v} == {k: v for k, v in o["running_p_ns"].items() if v}
    return worst
