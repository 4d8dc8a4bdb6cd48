"""The tables of the few goroutine-scoped events (stop-the-world, mark assists, logs,
labels), built from the parts each chunk's threads gave (:func:`.streams.few_events`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a part's process builds rows, never frames (gotrace.partprocs)
    import pandas as pd

from . import spec as s
from .columns import SCHEMAS, typed_frame
from .order import pair_by_g

# the columns of each part: arrays (the first five), then the strings the events name
FEW_COLS = ("T", "G", "A0", "TY", "M", "kind", "category", "message")


def few_tables(
    parts: list[dict], assist: bool, last_ns: int, final: bool
) -> tuple[dict[str, pd.DataFrame], list[dict]]:
    """The stw, logs and labels tables (and assist, when ``assist``) of the events in
    ``parts`` (emptied as they are read), and what must be held for the chunks to come:
    the STWs and assists still open (none if ``final``: they close at ``last_ns``)."""
    out: dict[str, pd.DataFrame] = {}
    few = {}
    for k in FEW_COLS:  # column by column, each part's copy released as it is used
        got = [p.pop(k) for p in parts]
        flat = [x for c in got for x in c] if k not in FEW_COLS[:5] else None
        few[k] = np.concatenate(got) if flat is None else np.array(flat, dtype=object)
        del got
    T, G, A0, TY, M = (few[k] for k in ("T", "G", "A0", "TY", "M"))
    out["stw"], open_stw = pair_by_g(
        T, G, A0, TY == s.EV_STWBEGIN, TY == s.EV_STWEND, None, few["kind"], last_ns, final, kind=True
    )
    open_assist = np.zeros(0, dtype=np.int64)
    if assist:
        out["assist"], open_assist = pair_by_g(
            T,
            G,
            A0,
            TY == s.EV_GCMARKASSISTBEGIN,
            TY == s.EV_GCMARKASSISTEND,
            TY == s.EV_GCMARKASSISTACTIVE,
            few["kind"],
            last_ns,
            final,
            kind=False,
        )
    lg = np.flatnonzero(TY == s.EV_USERLOG)
    lg = lg[np.argsort(T[lg], kind="stable")]
    out["logs"] = typed_frame(
        {
            "t_ns": T[lg],
            "g": G[lg],
            "m": M[lg],
            "task": A0[lg],
            "category": few["category"][lg],
            "message": few["message"][lg],
        },
        SCHEMAS["logs"],
    )
    lb = np.flatnonzero(TY == s.EV_GOLABEL)
    lb = lb[np.argsort(T[lb], kind="stable")]
    out["labels"] = typed_frame({"t_ns": T[lb], "g": G[lb], "m": M[lb], "label": few["kind"][lb]}, SCHEMAS["labels"])
    keep = np.sort(np.r_[open_stw, open_assist]).astype(np.int64)
    held = [] if final or not keep.size else [{k: v[keep] for k, v in few.items()}]
    return out, held
