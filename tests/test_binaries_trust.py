"""The collector binaries the lab runs as root are checked before every use.

``go build`` is replaced by a stand-in that writes small files where the real one writes the
programs (building the real collectors takes a minute on a loaded machine and proves nothing
more here): what is under test is the cache's bookkeeping — the SHA-256 recorded beside a
build, the check of it and of owners and modes on every call, the rebuild or the refusal.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from gmpanalysis.errors import LabError
from gmpanalysis.lab import binaries


@pytest.fixture
def fake_go(tmp_path, monkeypatch):
    """A cache under tmp_path and a go that 'builds' each program as a small script; returns
    the list of builds made."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    for var in ("GMP_BIN_DIR", "GMP_COLLECTORS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(binaries, "find_go", lambda: "/fake/go")
    monkeypatch.setattr(binaries, "_go_version", lambda go, src: "go1.test")
    builds: list[int] = []

    def run(cmd, cwd=None, **kw):
        target = Path(cmd[cmd.index("-o") + 1])
        names = binaries.CMDS if str(cmd[cmd.index("-o") + 1]).endswith("/") else (target.name,)
        where = target if str(cmd[cmd.index("-o") + 1]).endswith("/") else target.parent
        for n in names:
            (where / n).write_text(f"#!/bin/sh\necho {n} {len(builds)}\n")
        if names is binaries.CMDS:
            builds.append(1)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(binaries.subprocess, "run", run)
    return builds


def _dir(found: dict[str, Path]) -> Path:
    return found["gmp-sampler"].parent


def test_a_build_records_its_hashes_and_is_private(fake_go):
    found = binaries.ensure_binaries()
    d = _dir(found)
    assert fake_go == [1]
    sums = (d / binaries.SUMS).read_text().splitlines()
    assert sorted(line.split("  ")[1] for line in sums) == sorted(binaries.PROGRAMS)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o755 for f in found.values())
    assert binaries.verify_build(d) is None
    binaries.ensure_binaries()
    assert fake_go == [1]  # verified, not rebuilt


@pytest.mark.parametrize(
    "tamper, why",
    [
        (lambda d: (d / "gmp-sampler").write_text("#!/bin/sh\nevil\n"), "changed since it was built"),
        (lambda d: os.chmod(d / "gmp-demoapp", 0o775), "writable by group or others"),
        (lambda d: (d / binaries.SUMS).unlink(), "SHA256SUMS"),
        (lambda d: (d / "gmp-loadgen").unlink(), "gmp-loadgen"),
        (lambda d: ((d / "gmp-spinner").unlink(), (d / "gmp-spinner").symlink_to("/bin/sh")), "symbolic link"),
    ],
    ids=["content", "mode", "no-sums", "missing", "symlink"],
)
def test_a_tampered_build_is_rebuilt(fake_go, capsys, tamper, why):
    d = _dir(binaries.ensure_binaries())
    tamper(d)
    assert binaries.verify_build(d) is not None
    found = binaries.ensure_binaries()
    assert fake_go == [1, 1]
    assert why in capsys.readouterr().err
    assert binaries.verify_build(_dir(found)) is None
    assert "evil" not in found["gmp-sampler"].read_text()


def test_a_cache_others_can_write_is_refused(fake_go):
    d = _dir(binaries.ensure_binaries())
    os.chmod(d.parent, 0o777)  # .../gmpanalysis/bin
    with pytest.raises(LabError, match=r"writable by group or others.*XDG_CACHE_HOME"):
        binaries.ensure_binaries()


def test_a_sticky_cache_base_is_accepted(fake_go, tmp_path, monkeypatch):
    base = tmp_path / "shared-tmp"
    base.mkdir()
    os.chmod(base, 0o1777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(base))
    assert binaries.verify_build(_dir(binaries.ensure_binaries())) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_build_owned_by_another_user_is_refused(fake_go):
    d = _dir(binaries.ensure_binaries())
    os.chown(d, 4321, 4321)
    with pytest.raises(LabError, match=r"belongs to uid 4321.*remove"):
        binaries.ensure_binaries()
    assert fake_go == [1]  # not removed, not rebuilt


def test_a_symlinked_build_dir_is_refused(fake_go, tmp_path):
    d = _dir(binaries.ensure_binaries())
    elsewhere = tmp_path / "elsewhere"
    d.rename(elsewhere)
    d.symlink_to(elsewhere)
    with pytest.raises(LabError, match="symbolic link"):
        binaries.ensure_binaries()


def test_gmp_bin_dir_checked_too(fake_go, tmp_path, monkeypatch):
    d = _dir(binaries.ensure_binaries())
    monkeypatch.setenv("GMP_BIN_DIR", str(d))
    assert binaries.ensure_binaries() == {p: d / p for p in binaries.PROGRAMS}  # SUMS verified
    (d / "gmp-sampler").write_text("#!/bin/sh\nevil\n")
    with pytest.raises(LabError, match="GMP_BIN_DIR.*changed since it was built"):
        binaries.ensure_binaries()
    plain = tmp_path / "plain"
    plain.mkdir()
    for p in binaries.PROGRAMS:
        (plain / p).write_text("#!/bin/sh\n")
        os.chmod(plain / p, 0o755)
    monkeypatch.setenv("GMP_BIN_DIR", str(plain))
    assert binaries.ensure_binaries()["gmp-sampler"] == plain / "gmp-sampler"  # no SUMS: modes only
    os.chmod(plain / "gmp-sampler", 0o777)
    with pytest.raises(LabError, match="GMP_BIN_DIR.*writable by group or others"):
        binaries.ensure_binaries()
