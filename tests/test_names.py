"""The one path-component rule, on the golden cases the Go node agent is tested against too
(tests/data/names.json; collectors/cmd/gmp-agent TestSafeNames)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gmpanalysis.fleet.store import bundle_parts
from gmpanalysis.kube.paths import bundle_dir, safe_component
from gmpanalysis.names import path_component

CASES = json.loads((Path(__file__).parent / "data" / "names.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=lambda c: repr(c["in"])[:24])
def test_golden(case):
    got = path_component(case["in"])
    assert got == case["out"]
    assert got and got not in (".", "..") and "/" not in got and "\0" not in got and len(got) <= 63


def test_a_capture_stamp_is_kept_and_a_valid_pod_gets_no_hash(tmp_path):
    """Every collect once hashed its own UTC stamp ('T' and 'Z' are not DNS-1123) and warned
    that a valid pod name was not one."""
    stamp = "20261126T221359Z"
    assert safe_component(stamp) == stamp
    d = bundle_dir(tmp_path, "web", "caddy-a-5d8f9c7b4-r69x6", "caddy", stamp)
    assert d.name == f"web-caddy-a-5d8f9c7b4-r69x6-caddy-{stamp}" and "~" not in d.name


def test_the_store_names_partitions_by_the_same_rule():
    meta = {"cluster": "c1", "namespace": "../etc", "pod": "a/b c", "capture": "20261126T221359Z-ab12"}
    parts = bundle_parts(meta)
    assert parts["namespace"] == path_component("../etc") and parts["pod"] == path_component("a/b c")
    assert parts["capture"] == "20261126T221359Z-ab12" and parts["cluster"] == "c1"
