"""The columns and dtypes of every table a trace read gives (documented on
:class:`~gmpanalysis.gotrace.GoTrace`), and frames built with exactly those."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a part's process builds rows, never frames (gotrace.partprocs)
    import pandas as pd

# column dtypes of every table (documented on GoTrace)
SCHEMAS: dict[str, dict[str, str]] = {
    "running": {
        "g": "int64",
        "p": "int32",
        "m": "int64",
        "start_ns": "int64",
        "end_ns": "int64",
        "label": "category",
        "open": "bool",
    },
    "sweep": {
        "p": "int64",
        "m": "int64",
        "start_ns": "int64",
        "end_ns": "int64",
        "swept_bytes": "int64",
        "reclaimed_bytes": "int64",
        "open": "bool",
    },
    "stw": {"start_ns": "int64", "end_ns": "int64", "kind": "object", "g": "int64", "open": "bool"},
    "assist": {"g": "int64", "start_ns": "int64", "end_ns": "int64", "open": "bool"},
    "logs": {"t_ns": "int64", "g": "int64", "m": "int64", "task": "int64", "category": "object", "message": "object"},
    "labels": {"t_ns": "int64", "g": "int64", "m": "int64", "label": "object"},
    "gc": {"seq": "int64", "start_ns": "int64", "end_ns": "int64", "open": "bool"},
}


def rows_frame(rows: list[tuple], names: tuple[str, ...], table: str) -> pd.DataFrame:
    """A table from row tuples whose fields are ``names`` (in that order)."""
    cols = dict(zip(names, zip(*rows, strict=True), strict=True)) if rows else {}
    return typed_frame(cols, SCHEMAS[table])


def typed_frame(cols: dict[str, object], dtypes: dict[str, str]) -> pd.DataFrame:
    """A frame with exactly these columns and dtypes, built from arrays that already have
    them (pandas' astype on many small frames dominated the cost of short traces)."""
    import pandas as pd

    return pd.DataFrame(
        {
            k: pd.Categorical(cols.get(k, ())) if t == "category" else np.asarray(cols.get(k, ()), dtype=t)
            for k, t in dtypes.items()
        },
        copy=False,
    )


def label_dtype(n_names: int) -> type:
    """The narrowest type for label ids below ``n_names`` (GC worker labels: a handful)."""
    return next(t for t in (np.int8, np.int16, np.int32) if n_names <= np.iinfo(t).max + 1)


def running_frame(cols: dict[str, np.ndarray], lab: np.ndarray, names: dict[str, int]) -> pd.DataFrame:
    """The running table from its columns (g, p, m, start_ns, end_ns, open) and the label
    ids ``lab`` (``names``: label -> id), which become a category in the labels' order."""
    import pandas as pd

    categories = sorted(names)
    at = {name: i for i, name in enumerate(categories)}
    remap = np.zeros(len(names), dtype=label_dtype(len(names)))
    for name, i in names.items():
        remap[i] = at[name]
    frame = {k: cols[k] for k in ("g", "p", "m", "start_ns", "end_ns")}
    frame["label"] = pd.Categorical.from_codes(remap[lab], categories=categories)
    frame["open"] = cols["open"]
    return pd.DataFrame(frame, copy=False)
