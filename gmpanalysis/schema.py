"""The bundle contract: every field of meta.json, its type and meaning, in one place.

``FIELDS`` is the owner. :class:`BundleMeta` checks a meta.json dict against it (the
reader does on every load, every writer before every write), and the JSON Schema that
other languages validate against (``gmpanalysis/bundle-meta.schema.json``) is
generated from it (:func:`json_schema`; a test keeps the committed file equal to it).

Versions: 1 (the first lab and kube bundles) and 2. Version 2 writers (:func:`new_meta`)
write every key of the contract, ``complete`` and ``gomaxprocs_effective`` included (null
when the collector could not know it); ``levels`` lists the cgroup levels sampled (the
process's own cgroup first, then ancestors with a quota: container, pod), each with its
limits at the start (limits.csv has them over time). A version 1 meta is
read by filling those in (:func:`upgrade`). Unknown keys are kept, so a newer writer's extra
facts survive an older reader.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from .errors import BundleError

SCHEMA = 2
READABLE = (1, 2)
SCHEMA_FILE = Path(__file__).parent / "bundle-meta.schema.json"


@dataclasses.dataclass(frozen=True)
class Field:
    """One meta.json key: JSON types allowed (``"integer"``, ``"string"``, ``"boolean"``,
    ``"number"``, ``"object"``, ``"array"``, ``"null"``), whether a bundle must carry it,
    an integer range, allowed values, and what it means."""

    types: tuple[str, ...]
    doc: str
    required: bool = False
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[Any, ...] | None = None
    items: str | None = None  # JSON type of array items


def _f(types: str, doc: str, **kw: Any) -> Field:
    return Field(tuple(types.split("|")), doc, **kw)


FIELDS: dict[str, Field] = {
    "schema": _f("integer", "bundle schema version", required=True, enum=READABLE),
    "source": _f("string", "who wrote the bundle", required=True, enum=("lab", "kube")),
    "name": _f("string", "bundle name (defaults to the directory name)", required=True),
    "complete": _f("boolean", "false until the collection finished; a killed collector leaves false"),
    # target
    "namespace": _f("string|null", "Kubernetes namespace"),
    "pod": _f("string|null", "pod name"),
    "container": _f("string|null", "container name"),
    "node": _f("string|null", "node (host) name"),
    "pod_uid": _f("string|null", "pod UID"),
    "container_id": _f("string|null", "container ID as the kubelet reports it (runtime://id)"),
    "qos": _f("string|null", "QoS class", enum=("Guaranteed", "Burstable", "BestEffort", None)),
    "restart_count": _f("integer|null", "the container's restart count at the start", minimum=0),
    # limits (the container's; levels lists every level sampled)
    "period_us": _f("integer", "CFS period (µs)", required=True, minimum=1000, maximum=1_000_000),
    "quota_us": _f("integer|null", "CFS quota per period (µs); null = no limit", required=True, minimum=1000),
    "burst_us": _f("integer|null", "CFS burst (µs)", minimum=0),
    "cpu_limit": _f("string|null", 'the limit as written ("500m")'),
    "gomaxprocs_env": _f("string|null", "GOMAXPROCS in the environment (null if unset)"),
    "gomaxprocs_effective": _f("integer|null", "GOMAXPROCS the runtime chose at start (null: unknown)", minimum=1),
    "go_version": _f("string|null", "Go version of the target"),
    "levels": _f(
        "array",
        "cgroup levels sampled, the process's own cgroup first: objects with level (the name in "
        "cpu_stat.csv's cgroup column: container, pod), cgroup (path), period_us, quota_us, burst_us at the start",
        items="object",
    ),
    "default_godebug": _f(
        "string|null",
        "the target binary's DefaultGODEBUG build setting (from its module's go line; "
        "containermaxprocs=0: the runtime ignores the limit); null: unknown",
    ),
    # host
    "kernel": _f("string|null", "uname -r of the node"),
    "cgroup_version": _f(
        "integer|null", "1 or 2 (null until the sampler found the cgroup)", required=True, enum=(1, 2, None)
    ),
    "cgroup_paths": _f("array", "the cgroup directories sampled", items="string"),
    "ncpu": _f("integer|null", "CPUs of the node", minimum=1),
    "hz": _f("integer|null", "kernel CONFIG_HZ", minimum=1),
    "user_hz": _f("integer|null", "USER_HZ of /proc/stat", minimum=1),
    # sampler, clock, load, trace
    "sampler": _f("object", "the sampler: interval_ns, policy, lateness and CPU statistics, ..."),
    "mono_start_ns": _f("integer|null", "CLOCK_MONOTONIC at the start of the collection", minimum=0),
    "mono_end_ns": _f("integer|null", "CLOCK_MONOTONIC at its end", minimum=0),
    "wall_start": _f("string|null", "wall-clock start (ISO 8601, for humans only)"),
    "load": _f("object|null", "lab: the load generator's settings and summary"),
    "workload": _f("object|null", "lab: the demo app's workload"),
    "trace": _f("object|null", "the trace capture: times, status, bytes"),
    "restarts": _f("array", "container restarts followed during the collection", items="object"),
    "notes": _f("array", "what the collector wants the reader to know", items="string"),
    "error": _f("string|null", "why the collection ended early"),
}

_PY = {"integer": int, "string": str, "boolean": bool, "number": (int, float), "object": dict, "array": list}


def _type_ok(v: Any, types: tuple[str, ...]) -> bool:
    if v is None:
        return "null" in types
    if isinstance(v, bool):  # a JSON true is not an integer
        return "boolean" in types
    return any(t != "null" and isinstance(v, _PY[t]) for t in types)


def check(meta: Any, source: str = "meta.json") -> dict[str, Any]:
    """Check a meta.json object against :data:`FIELDS`; raise :class:`BundleError` naming
    the file, the key and what is wrong. Returns the dict (unknown keys kept)."""
    if not isinstance(meta, dict):
        raise BundleError(f"{source}: expected a JSON object at the top level")
    for key, f in FIELDS.items():
        if key not in meta:
            if f.required:
                raise BundleError(
                    f"{source}: missing key {key!r}; the collector that wrote it is incomplete or too old"
                )
            continue
        v = meta[key]
        if not _type_ok(v, f.types):
            raise BundleError(
                f"{source}: {key} must be {' or '.join(f.types)} ({f.doc}), got {type(v).__name__} {_short(v)}"
            )
        if f.enum is not None and v not in f.enum:
            raise BundleError(f"{source}: {key} must be one of {list(f.enum)}, got {_short(v)}")
        if isinstance(v, int) and not isinstance(v, bool):
            if (f.minimum is not None and v < f.minimum) or (f.maximum is not None and v > f.maximum):
                lo = "" if f.minimum is None else f"{f.minimum}.."
                hi = "" if f.maximum is None else f"{f.maximum}"
                raise BundleError(f"{source}: {key} {v} is outside {lo or '..'}{hi} ({f.doc})")
        if f.items is not None and isinstance(v, list):
            bad = [x for x in v if not _type_ok(x, (f.items,))]
            if bad:
                raise BundleError(f"{source}: {key} must hold {f.items}s, got {_short(bad[0])}")
    return meta


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def upgrade(meta: dict[str, Any]) -> dict[str, Any]:
    """A version 1 meta as version 2 (a new dict; the file is never rewritten)."""
    if meta.get("schema") != 1:
        return meta
    out = dict(meta)
    out["schema"] = 2
    out.setdefault("complete", True)
    out.setdefault("gomaxprocs_effective", None)
    return out


def new_meta(source: str, name: str, **fields: Any) -> dict[str, Any]:
    """A version 2 meta dict for a writer: every key of the contract present (null where
    not known yet), so the file is valid from the first write."""
    meta: dict[str, Any] = {k: None for k, f in FIELDS.items() if "null" in f.types}
    meta.update(
        schema=SCHEMA,
        source=source,
        name=name,
        complete=False,
        period_us=100_000,
        cgroup_paths=[],
        sampler={},
        restarts=[],
    )
    meta.update(fields)
    return check(meta, f"new {source} meta")


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of meta.json, generated from :data:`FIELDS`."""
    props: dict[str, Any] = {}
    for key, f in FIELDS.items():
        p: dict[str, Any] = {"type": list(f.types) if len(f.types) > 1 else f.types[0], "description": f.doc}
        if f.enum is not None:
            p["enum"] = list(f.enum)
        if f.minimum is not None:
            p["minimum"] = f.minimum
        if f.maximum is not None:
            p["maximum"] = f.maximum
        if f.items is not None:
            p["items"] = {"type": f.items}
        props[key] = p
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "gmpanalysis/bundle-meta.schema.json",
        "title": "gmpanalysis run bundle: meta.json",
        "description": __doc__.strip().splitlines()[0],
        "type": "object",
        "required": [k for k, f in FIELDS.items() if f.required],
        "properties": props,
        "additionalProperties": True,
    }


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
