"""cgroup limits and layout, Python side, on the SAME golden files as the Go reader.

The cgroup reader that runs in production is Go (collectors/internal/cgroup, tested with
`go test` over the same files). Python keeps the limit readers and the layout rules the lab
needs; these tests hold them to tests/data/cgroup/expected.json (one directory per case
under v1/ and v2/, id = its name) and tests/data/cgroup/paths.json (lookups), so the two
cannot drift.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import DATA

from gmpanalysis.cgroup import (
    CgroupFiles,
    CpuLimits,
    detect,
    detect_version,
    lookup,
    parse_cpu_max,
    read_cpu_limits_v1,
    read_cpu_limits_v2,
    v1_dirs,
)
from gmpanalysis.errors import CgroupFormatError

CG = DATA / "cgroup"
EXPECTED = json.loads((CG / "expected.json").read_text())["cases"]
PATHS = json.loads((CG / "paths.json").read_text())
CASES = sorted(f"{v}/{d.name}" for v in ("v1", "v2") for d in (CG / v).iterdir() if d.is_dir())


def test_every_case_directory_has_an_expectation():
    assert sorted(EXPECTED) == CASES


def check_error(msg: str, case_dir: Path, want: dict) -> None:
    assert str(case_dir / want["file"]) in msg
    if "line" in want:
        assert f"line {want['line']}:" in msg
    if "quote" in want:
        quoted = re.search(r'got "(.*)"', msg)
        assert quoted and want["quote"] in quoted.group(1), msg
    assert want.get("contains", "") in msg
    assert len(msg) < 400


@pytest.mark.parametrize("case", CASES)
def test_limits(case):
    d = CG / case
    version = int(case[1])
    want = EXPECTED[case]["limits"]
    read = read_cpu_limits_v1 if version == 1 else read_cpu_limits_v2
    if "error" in want:
        with pytest.raises(CgroupFormatError) as e:
            read(d)
        check_error(str(e.value), d, want["error"])
        return
    quota = None if want["quota_us"] == -1 else want["quota_us"]
    assert read(d) == CpuLimits(version, want["period_us"], quota, want["burst_us"])


def test_limit_in_cpus():
    assert read_cpu_limits_v2(CG / "v2" / "set").cpus == 0.5
    assert read_cpu_limits_v1(CG / "v1" / "unset").cpus is None


def test_cpu_max_forms():
    assert parse_cpu_max("max 100000") == (None, 100_000)
    assert parse_cpu_max("50000 100000\n") == (50_000, 100_000)
    assert parse_cpu_max(b"max") == (None, 100_000)
    for bad in ("50000 0", "-5 100000", "50000  100000", " 50000 100000", "50000 100000\n\n", ""):
        with pytest.raises(CgroupFormatError):
            parse_cpu_max(bad)


def make_files(root: Path, files: dict) -> Path:
    """A tree from paths.json: a value is a file's content; None or a path ending in / a directory."""
    for p, content in files.items():
        full = root / p
        if content is None or p.endswith("/"):
            full.mkdir(parents=True, exist_ok=True)
        else:
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_text(content)
    return root


@pytest.mark.parametrize("case", PATHS["lookups"], ids=[c["id"] for c in PATHS["lookups"]])
def test_lookup(tmp_path, case):
    """The "does this cgroup exist" rule of gmp-sampler (collectors/internal/cgroup), on the
    same small mounts as the Go test; a spec's | alternatives are tried in order."""
    root = make_files(tmp_path, case["files"])
    want = case["want"]
    name, _, rels = case["spec"].rpartition("=")
    mount = detect(root)
    if mount is None:
        assert want.get("error") == "no_controller"
        assert detect_version(root) is None
        return
    found, why = None, []
    try:
        for rel in rels.split("|"):
            r = lookup(mount, rel)
            if isinstance(r, CgroupFiles):
                found = r
                break
            why.append(r)
    except CgroupFormatError as e:
        assert want.get("error") == "invalid" and want["contains"] in str(e)
        return
    if "error" in want:
        assert found is None and want["error"] == "not_exist"
        if len(why) == 1:  # the sampler's message for several alternatives is its own
            assert want["contains"] in why[0]
        return
    assert found is not None, why
    usage = root / want["usage"] if want["usage"] else None
    assert (name or found.rel or "/") == want["name"]
    got = (found.rel, found.version, found.stat, found.usage)
    assert got == (want["rel"], want["version"], root / want["stat"], usage)


def test_v1_dirs_follow_the_mount(tmp_path):
    root = make_files(tmp_path, {"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpuacct/": None})
    assert v1_dirs(root, "/a/../g") == (root / "cpu,cpuacct" / "g", root / "cpuacct" / "g")
