"""The mutations that need what cgroup v2 bundles carry (tests/bundle_mutants.py makes
them only on bases with cgroup_version 2): a ``cgroup`` column's level renamed or one
level's rows removed; ``ncpu`` changed in meta.json, host_stat.csv or both; meta.json
``levels`` reordered, dropped, doubled or given another quota or period; a limits.csv row
inserted mid-run."""

from __future__ import annotations

import json
import random

V2_OPS = ("level", "ncpu", "levels", "resize")


def _rows(raw: bytes) -> tuple[list[bytes], list[list[bytes]]]:
    lines = [x for x in raw.split(b"\n") if x] or [b""]
    return lines[0].split(b","), [x.split(b",") for x in lines[1:]]


def _unrows(header: list[bytes], rows: list[list[bytes]]) -> bytes:
    return b"\n".join(b",".join(r) for r in [header, *rows]) + b"\n"


def _v2_level(rng: random.Random, files: dict[str, bytes | str], what: list[str]) -> None:
    """A row of one level named for another (or for none), or a level's rows all gone."""
    names = [n for n in ("cpu_stat.csv", "limits.csv") if isinstance(files.get(n), bytes)]
    name = rng.choice(names)
    header, rows = _rows(files[name])  # type: ignore[arg-type]
    if b"cgroup" not in header or not rows:
        return
    j = header.index(b"cgroup")
    levels = sorted({r[j] for r in rows if len(r) > j})
    if rng.random() < 0.5 and len(levels) > 1:
        gone = rng.choice(levels)
        rows = [r for r in rows if len(r) <= j or r[j] != gone]
        what.append(f"{name} rows of level {gone.decode(errors='replace')} removed")
    else:
        i = rng.randrange(len(rows))
        if len(rows[i]) <= j:
            return
        rows[i][j] = rng.choice([*levels, b"x", b"", b"Container"])
        what.append(f"{name} row {i + 2} level = {rows[i][j]!r}")
    files[name] = _unrows(header, rows)


def v2_op(rng: random.Random, files: dict[str, bytes | str], what: list[str], op: str | None = None) -> str | None:
    """One change of kind ``op`` (random if None) to a v2 bundle's ``files`` (name -> bytes),
    said in ``what``; returns the kind."""
    op = op or rng.choice(V2_OPS)
    raw = files.get("meta.json")
    try:
        meta = json.loads(raw) if isinstance(raw, bytes) else None
    except (ValueError, RecursionError):
        meta = None
    if op == "level":
        _v2_level(rng, files, what)
        return op
    if op == "resize" and isinstance(files.get("limits.csv"), bytes) and isinstance(files.get("cpu_stat.csv"), bytes):
        header, rows = _rows(files["limits.csv"])  # type: ignore[arg-type]
        _, samples = _rows(files["cpu_stat.csv"])  # type: ignore[arg-type]
        want = [b"t_ns", b"prev_ns", b"cgroup", b"period_us", b"quota_us", b"burst_us"]
        if header != want or not rows or len(samples) < 3:
            return op
        try:
            t = int(rng.choice(samples[1:-1])[0])
        except ValueError:
            return op
        old = list(rng.choice(rows))
        k = rng.choice((3, 4, 5))
        old[k] = rng.choice((b"1000", b"", b"0", b"50000", b"2000000", b"10000000"))
        new = [str(t).encode(), str(t - 10_000_000).encode(), *old[2:]]
        rows.append(new)
        rows.sort(key=lambda r: int(r[0]) if r[0].isdigit() else 0)
        files["limits.csv"] = _unrows(header, rows)
        what.append(f"limits.csv row at {t}: {want[k].decode()} = {old[k]!r} for {old[2]!r}")
        return op
    if meta is None:
        return op
    if op == "ncpu":
        n = rng.choice((1, 2, 3, 64, 4096))
        where = rng.choice(("meta", "host", "both"))
        if where != "host":
            meta["ncpu"] = n
        host = files.get("host_stat.csv")
        if where != "meta" and isinstance(host, bytes):
            header, rows = _rows(host)
            if b"ncpu" in header:
                j = header.index(b"ncpu")
                for r in rows[len(rows) // 2 :] if where == "host" else rows:
                    if len(r) > j:
                        r[j] = str(n).encode()
                files["host_stat.csv"] = _unrows(header, rows)
        what.append(f"ncpu = {n} in {where}")
    elif op == "levels":
        lv = meta.get("levels")
        if not isinstance(lv, list) or not lv:
            return op
        how = rng.choice(("reverse", "drop", "double", "quota", "period"))
        if how == "reverse":
            lv.reverse()
        elif how == "drop":
            del lv[rng.randrange(len(lv))]
        elif how == "double":
            lv.append(dict(rng.choice(lv)))
        elif isinstance(x := rng.choice(lv), dict):
            x[f"{how}_us"] = rng.choice((1000, 10_000, 200_000, 10**7, None))
        what.append(f"meta levels {how}")
    else:
        return op
    files["meta.json"] = json.dumps(meta, indent=1).encode()
    return op
