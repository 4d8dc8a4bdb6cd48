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
import math
from pathlib import Path
from typing import Any

from .cgroup import MAX_CPUS
from .errors import BundleError

SCHEMA = 2
READABLE = (1, 2)
SCHEMA_FILE = Path(__file__).parent / "bundle-meta.schema.json"


# Integers in meta.json are 64-bit (what every reader and writer holds them in); times are
# CLOCK_MONOTONIC ns since boot, below 2^62 (146 years: the sum of two still fits).
INT64 = (-(2**63), 2**63 - 1)
MAX_NS = 2**62


@dataclasses.dataclass(frozen=True)
class Field:
    """One meta.json key: JSON types allowed (``"integer"``, ``"string"``, ``"boolean"``,
    ``"number"``, ``"object"``, ``"array"``, ``"null"``), whether a bundle must carry it,
    an integer range (64-bit when not given), allowed values, what it means, and for an
    object (or an array of objects) the keys of it the readers use (others are kept)."""

    types: tuple[str, ...]
    doc: str
    required: bool = False
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[Any, ...] | None = None
    items: str | None = None  # JSON type of array items
    properties: dict[str, Field] | None = dataclasses.field(default=None, hash=False, compare=False)


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
    "pod_uid": _f(
        "string|null",
        "pod UID, as the kubelet names the pod's cgroups (a static pod's: its mirror pod's "
        "kubernetes.io/config.mirror annotation)",
    ),
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
        properties={
            "level": _f("string", "the level's name in cpu_stat.csv's cgroup column", required=True),
            "cgroup": _f("string|null", "the cgroup's path"),
            "period_us": _f("integer|null", "CFS period (µs)", minimum=1000, maximum=1_000_000),
            "quota_us": _f("integer|null", "CFS quota per period (µs); null = no limit", minimum=1000),
            "burst_us": _f("integer|null", "CFS burst (µs)", minimum=0),
        },
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
    "ncpu": _f("integer|null", "CPUs of the node", minimum=1, maximum=MAX_CPUS),
    "cpus_allowed": _f(
        "integer|null",
        "CPUs the target's threads may run on (their affinity at the collection's start: a cpuset, such as the "
        "static CPU manager's, or taskset); null or absent: not recorded, taken as ncpu",
        minimum=1,
        maximum=MAX_CPUS,
    ),
    "hz": _f("integer|null", "kernel CONFIG_HZ", minimum=1),
    "user_hz": _f("integer|null", "USER_HZ of /proc/stat", minimum=1),
    # sampler, clock, load, trace
    "sampler": _f(
        "object",
        "the sampler: interval_ns, policy, lateness and CPU statistics, ...",
        properties={
            "interval_ns": _f("integer|null", "sampling interval (ns)", minimum=1, maximum=MAX_NS),
            "mono_start_ns": _f("integer|null", "CLOCK_MONOTONIC of its first deadline", minimum=0, maximum=MAX_NS),
            "mono_end_ns": _f("integer|null", "CLOCK_MONOTONIC when it stopped", minimum=0, maximum=MAX_NS),
        },
    ),
    "mono_start_ns": _f("integer|null", "CLOCK_MONOTONIC at the start of the collection", minimum=0, maximum=MAX_NS),
    "mono_end_ns": _f("integer|null", "CLOCK_MONOTONIC at its end", minimum=0, maximum=MAX_NS),
    "wall_start": _f("string|null", "wall-clock start (ISO 8601, for humans only)"),
    "load": _f("object|null", "lab: the load generator's settings and summary"),
    "workload": _f("object|null", "lab: the demo app's workload"),
    "cluster": _f("string|null", "the cluster's name (the store's first partition; gmp-agent --cluster)"),
    "capture": _f("string|null", "an identifier of the capture the collector chose (the store's last partition)"),
    "owner": _f(
        "object|null",
        "kube: the pod's controller as the API names it (the store's workload: a ReplicaSet's Deployment)",
        properties={
            "kind": _f("string", "the controller's kind: ReplicaSet, StatefulSet, DaemonSet, Job, ..."),
            "name": _f("string", "the controller's name"),
            "pod_template_hash": _f("string|null", "the pod's pod-template-hash label (a Deployment's ReplicaSet)"),
        },
    ),
    "agent": _f(
        "object|null",
        "gmp-agent: the node, the trigger's verdict and rule, the workload, the start",
        properties={
            "workload": _f(
                "string|null",
                "namespace/controller/container: the workload of the agent's rate limits and of the store's "
                "workload partition (a ReplicaSet's Deployment)",
            ),
        },
    ),
    "trace": _f("object|null", "the trace capture: times, status, bytes"),
    "restarts": _f(
        "array",
        'container restarts followed during the collection: mono_ns with clock "samples" (the samples\' '
        "clock: the old container's last read, after which the analysis starts a new segment; null: before any "
        "read; without that clock, the collector's own machine's, which the analysis does not use), old and new "
        "container IDs",
        items="object",
    ),
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
    _check_object(meta, FIELDS, "", source)
    _check_text(meta, "", source)
    start, end = meta.get("mono_start_ns"), meta.get("mono_end_ns")
    if _type_ok(start, ("integer",)) and _type_ok(end, ("integer",)) and end < start:
        raise BundleError(
            f"{source}: mono_end_ns {end} is before mono_start_ns {start}; the collection's clock was not "
            "recorded by its collector (a hand-edited or merged meta.json)"
        )
    return meta


def _check_object(obj: dict[str, Any], fields: dict[str, Field], where: str, source: str) -> None:
    for key, f in fields.items():
        name = where + key
        if key not in obj:
            if f.required:
                raise BundleError(
                    f"{source}: missing key {name!r}; the collector that wrote it is incomplete or too old"
                )
            continue
        _check_value(obj[key], f, name, source)


def _check_value(v: Any, f: Field, key: str, source: str) -> None:
    if not _type_ok(v, f.types):
        raise BundleError(
            f"{source}: {key} must be {' or '.join(f.types)} ({f.doc}), got {type(v).__name__} {_short(v)}"
        )
    if f.enum is not None and v not in f.enum:
        raise BundleError(f"{source}: {key} must be one of {list(f.enum)}, got {_short(v)}")
    if isinstance(v, int) and not isinstance(v, bool):
        lo = INT64[0] if f.minimum is None else f.minimum
        hi = INT64[1] if f.maximum is None else f.maximum
        if not lo <= v <= hi:
            bounds = f"{'' if f.minimum is None else lo}..{'' if f.maximum is None else hi}"
            if f.minimum is None and f.maximum is None:
                bounds = "the 64-bit integers"
            raise BundleError(f"{source}: {key} {_short(v)} is outside {bounds} ({f.doc})")
    if isinstance(v, float) and not math.isfinite(v):
        raise BundleError(f"{source}: {key} is {v}, not a finite number ({f.doc})")
    if f.items is not None and isinstance(v, list):
        bad = [x for x in v if not _type_ok(x, (f.items,))]
        if bad:
            raise BundleError(f"{source}: {key} must hold {f.items}s, got {_short(bad[0])}")
        if f.properties is not None:
            for i, x in enumerate(v):
                _check_object(x, f.properties, f"{key}[{i}].", source)
    elif f.properties is not None and isinstance(v, dict):
        _check_object(v, f.properties, f"{key}.", source)


# meta.json is a few levels deep (sampler.cgroups[0].limits.quota_us: four); anything much
# deeper is no meta, and would only exhaust the stack of a later reader or writer
MAX_DEPTH = 32


def _check_text(v: Any, key: str, source: str, depth: int = 0) -> None:
    """No string anywhere in the meta (keys included) holds a lone surrogate: JSON can
    escape one (\\ud800), but it is not text, and nothing can print or encode it. Nor is the
    meta nested deeper than :data:`MAX_DEPTH`."""
    if depth > MAX_DEPTH:
        raise BundleError(
            f"{source}: {key} is nested more than {MAX_DEPTH} levels deep; meta.json holds the fields of "
            "gmpanalysis.schema a few levels deep: restore the collector's file"
        )
    if isinstance(v, dict):
        for k, x in v.items():
            _check_text(k, key, source, depth + 1)
            _check_text(x, f"{key}.{k}" if key else str(k), source, depth + 1)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _check_text(x, f"{key}[{i}]", source, depth + 1)
    elif isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise BundleError(
                f"{source}: {key or 'a key'} holds {v[e.start]!r} at character {e.start}, a lone surrogate "
                "that is not text; write the value as text (UTF-8)"
            ) from None


def _short(v: Any) -> str:
    try:
        s = repr(v)
    except ValueError:  # an integer of more digits than Python converts
        return f"<a {v.bit_length()}-bit integer>"
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


def _json_property(f: Field) -> dict[str, Any]:
    p: dict[str, Any] = {"type": list(f.types) if len(f.types) > 1 else f.types[0], "description": f.doc}
    if f.enum is not None:
        p["enum"] = list(f.enum)
    if f.minimum is not None:
        p["minimum"] = f.minimum
    if f.maximum is not None:
        p["maximum"] = f.maximum
    nested = None
    if f.properties is not None:
        nested = {
            "properties": {k: _json_property(x) for k, x in f.properties.items()},
            "required": [k for k, x in f.properties.items() if x.required],
        }
    if f.items is not None:
        p["items"] = {"type": f.items, **(nested or {})}
    elif nested is not None:
        p.update(nested)
    return p


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of meta.json, generated from :data:`FIELDS`."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "gmpanalysis/bundle-meta.schema.json",
        "title": "gmpanalysis run bundle: meta.json",
        "description": __doc__.strip().splitlines()[0],
        "type": "object",
        "required": [k for k, f in FIELDS.items() if f.required],
        "properties": {k: _json_property(f) for k, f in FIELDS.items()},
        "additionalProperties": True,
    }


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
