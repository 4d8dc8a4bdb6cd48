"""Digests of every shipped run's public tables (df_periods, df_levels, df_freezes,
df_gomaxprocs): for each table its columns, their dtype kinds and row count, and per column
a hash that does not depend on library versions' formatting (integers exactly, floats to
about 9 digits, text as text). The test
(tests/test_table_digests.py) holds a change of any value in any of them to this file.

    .venv/bin/python tests/table_digest.py --write     # after a change meant to move them
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "data" / "table_digests.json"
DIRS = ("fixtures/runs", "fixtures/runs-v2", "fixtures/whatif")
TABLES = ("df_periods", "df_levels", "df_freezes", "df_gomaxprocs")


def _hash(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def column_digest(s: pd.Series) -> str:
    """Integers and booleans exactly; floats to 30 bits of mantissa (about 9 digits: the
    last bits of a sum move with the summation order of a library version); text as text."""
    if pd.api.types.is_bool_dtype(s.dtype) or pd.api.types.is_integer_dtype(s.dtype):
        v = s.to_numpy(dtype=np.float64, na_value=np.nan)
        nan = np.isnan(v)
        return f"n={len(v)} na={int(nan.sum())} {_hash(nan, np.where(nan, 0, v).astype(np.int64))}"
    if pd.api.types.is_numeric_dtype(s.dtype):
        v = s.to_numpy(dtype=np.float64, na_value=np.nan)
        nan = np.isnan(v)
        m, e = np.frexp(np.where(np.isfinite(v), v, 0.0))
        return f"n={len(v)} na={int(nan.sum())} {_hash(nan, np.isinf(v), np.round(m * 2**30).astype(np.int64), e)}"
    text = "\n".join("<NA>" if pd.isna(x) else str(x) for x in s.to_numpy(dtype=object))
    return "text " + hashlib.sha256(text.encode()).hexdigest()[:16]


def table_digest(df: pd.DataFrame) -> dict[str, str]:
    return {"rows": str(len(df)), **{str(c): column_digest(df[c]) for c in df.columns}}


def digests() -> dict[str, dict[str, object]]:
    import gmpanalysis as gmp

    out: dict[str, dict[str, object]] = {}
    for d in DIRS:
        for p in sorted((REPO / d).iterdir()):
            if not (p / "meta.json").exists():
                continue
            key = f"{d}/{p.name}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    run = gmp.load_run(p)
                except Exception as e:  # noqa: BLE001 - the error is the digest
                    out[key] = {"load": f"{type(e).__name__}"}
                    continue
                got: dict[str, object] = {}
                for t in TABLES:
                    try:
                        got[t] = table_digest(getattr(gmp, t)(run))
                    except Exception as e:  # noqa: BLE001
                        got[t] = f"{type(e).__name__}"
            out[key] = got
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        print(__doc__)
        sys.exit(2)
    GOLDEN.write_text(json.dumps(digests(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN.relative_to(REPO)}")
