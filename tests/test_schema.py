"""The bundle contract (gmpanalysis.schema): one owner of every meta.json field, a JSON
Schema generated from it for other languages, golden metas of every writer that both the
Python check and the JSON Schema accept.

Golden metas: tests/data/meta/lab-v1.json is fixtures/runs/cpu-0.5cpu-gmp8/meta.json;
kube-v1-inpod.json is the meta.json `gmpanalysis collect` wrote for the in-pod lateness
measurement (fixtures/README.md, "sampling/"), as collected.
"""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
from conftest import DATA, RUNS

import gmpanalysis as gmp
from gmpanalysis.bundle import read_meta, to_meta
from gmpanalysis.schema import FIELDS, SCHEMA, SCHEMA_FILE, check, json_schema, new_meta, schema_text, upgrade

GOLDEN = sorted((DATA / "meta").glob("*.json"))
VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


def test_the_committed_json_schema_is_generated_from_the_owner():
    assert SCHEMA_FILE.read_text() == schema_text(), (
        "run: python -c 'from gmpanalysis.schema import *; SCHEMA_FILE.write_text(schema_text())'"
    )
    jsonschema.Draft202012Validator.check_schema(json_schema())


@pytest.mark.parametrize("path", GOLDEN + [p / "meta.json" for p in RUNS], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden_and_shipped_metas_pass_both_checks(path):
    meta = json.loads(path.read_text())
    check(meta, str(path))
    VALIDATOR.validate(meta)
    up = read_meta(path)
    assert up["schema"] == SCHEMA and "gomaxprocs_effective" in up and "complete" in up
    VALIDATOR.validate(up)


@pytest.mark.parametrize("source", ["lab", "kube"])
def test_a_new_meta_is_valid_from_the_first_write(tmp_path, source):
    meta = new_meta(source, "x", quota_us=50_000)
    assert set(FIELDS) - set(meta) <= {"levels", "notes"}  # every key present (null where unknown)
    VALIDATOR.validate(meta)
    to_meta(tmp_path / "meta.json", meta)
    assert read_meta(tmp_path / "meta.json") == meta


def _wrong(f):
    """A value of a JSON type the field does not allow."""
    for v in ("text", 7, True, {"a": 1}, [1], 1.5, None):
        t = {str: "string", bool: "boolean", int: "integer", dict: "object", list: "array", float: "number"}.get(
            type(v)
        )
        if v is None and "null" not in f.types:
            return v
        if v is not None and t not in f.types and not (t == "integer" and "number" in f.types):
            return v
    raise AssertionError(f)


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_every_field_rejects_a_wrong_type_naming_the_key_and_the_file(key, tmp_path):
    meta = json.loads(GOLDEN[0].read_text())
    meta[key] = _wrong(FIELDS[key])
    with pytest.raises(gmp.BundleError, match=rf"^bad\.json: {key} must be") as e:
        check(meta, "bad.json")
    assert VALIDATOR.is_valid(meta) is False, e.value  # the JSON Schema agrees
    # ... and a writer cannot write it
    with pytest.raises(gmp.BundleError, match=key):
        to_meta(tmp_path / "meta.json", meta)
    assert not (tmp_path / "meta.json").exists()


def test_required_keys_and_ranges():
    meta = json.loads(GOLDEN[0].read_text())
    for key in [k for k, f in FIELDS.items() if f.required]:
        bad = {k: v for k, v in meta.items() if k != key}
        with pytest.raises(gmp.BundleError, match=f"missing key '{key}'"):
            check(bad, "m.json")
        assert not VALIDATOR.is_valid(bad)
    for key, value in [
        ("period_us", 999),
        ("period_us", 1_000_001),
        ("quota_us", 999),
        ("ncpu", 0),
        ("ncpu", 8193),  # past CONFIG_NR_CPUS's largest: a replay would size its arrays by it
        ("cpus_allowed", 2**31),
        ("mono_start_ns", -1),
    ]:
        bad = {**meta, key: value}
        with pytest.raises(gmp.BundleError, match=f"{key} {value} is outside"):
            check(bad, "m.json")
        assert not VALIDATOR.is_valid(bad)


def test_unknown_keys_are_kept_and_v1_is_upgraded_without_losing_anything():
    v1 = json.loads((DATA / "meta" / "kube-v1-inpod.json").read_text())
    v1["from_the_future"] = {"x": 1}
    up = upgrade(check(copy.deepcopy(v1)))
    assert up["schema"] == 2 and up["gomaxprocs_effective"] is None and up["from_the_future"] == {"x": 1}
    assert {k: v for k, v in up.items() if k not in ("schema", "gomaxprocs_effective")} == {
        k: v for k, v in v1.items() if k != "schema"
    }
