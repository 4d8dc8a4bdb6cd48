"""Pod and container cgroup paths: the golden table tests/data/cgroup/paths.json, which the Go
reader's tests (collectors/internal/cgroup) read too. collect.py builds the sampler's
``|``-joined --cgroup argument from these candidates and gmp-sampler resolves it on the
node, so both sides are held to one table: every driver × QoS × runtime × cgroup version."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from test_cgroup import make_files

from gmpanalysis.errors import CollectError
from gmpanalysis.kube.paths import container_cgroup_candidates, pod_cgroup_candidates, resolve

PATHS = json.loads((DATA / "cgroup" / "paths.json").read_text())


@pytest.mark.parametrize("case", PATHS["candidates"], ids=[c["id"] for c in PATHS["candidates"]])
def test_candidates(case):
    assert pod_cgroup_candidates(case["pod_uid"], case["qos"]) == case["pod"]
    assert container_cgroup_candidates(case["pod_uid"], case["qos"], case["container_id"]) == case["container"]


def make_node(tmp_path, version, rel):
    """A node's cgroup mount holding ``rel`` as paths.json's trees say: like the kernel,
    every cgroup directory on the way has its interface files."""
    tree = PATHS["trees"][str(version)]
    make_files(tmp_path, tree["root"])
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        sub = "/".join(parts[:i])
        make_files(tmp_path, {p.replace("{}", sub): c for p, c in tree["cgroup"].items()})
    return tmp_path


def test_every_layout_is_in_the_table():
    assert len(PATHS["layouts"]) == 2 * 2 * 3 * 3


@pytest.mark.parametrize("case", PATHS["layouts"], ids=[c["id"] for c in PATHS["layouts"]])
def test_resolves_every_layout(tmp_path, case):
    root = make_node(tmp_path, case["version"], case["container_path"])
    got = resolve(root, container_cgroup_candidates(case["pod_uid"], case["qos"], case["container_id"]))
    assert got == (case["container_path"], case["version"])
    assert resolve(root, pod_cgroup_candidates(case["pod_uid"], case["qos"])) == (case["pod_path"], case["version"])


def test_missing_cgroup_names_the_candidates(tmp_path):
    c = PATHS["candidates"][0]
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    with pytest.raises(CollectError, match="none of these cgroups exists"):
        resolve(tmp_path, c["container"])


def test_no_cpu_controller(tmp_path):
    with pytest.raises(CollectError, match="no cgroup cpu controller"):
        resolve(tmp_path, PATHS["candidates"][0]["container"])


@pytest.mark.parametrize("case", PATHS["invalid"], ids=[c["id"] for c in PATHS["invalid"]])
def test_inputs_are_validated(case):
    with pytest.raises(CollectError, match=case["error"]):
        container_cgroup_candidates(case["pod_uid"], case["qos"], case["container_id"])
