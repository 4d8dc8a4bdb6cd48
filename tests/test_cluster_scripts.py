"""The local-Kubernetes harness in scripts/cluster, without starting anything: the image
builder's archive is what `ctr images import` expects, and the shell scripts parse."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

CLUSTER = Path(__file__).resolve().parents[1] / "scripts" / "cluster"


def _mkimage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLUSTER / "mkimage.py"), *args], capture_output=True, text=True)


def test_mkimage_writes_a_docker_archive_with_checked_layers(tmp_path):
    prog = tmp_path / "prog"
    prog.write_bytes(b"\x7fELF not really")
    out = tmp_path / "img.tar"
    r = _mkimage(str(out), "localhost/prog:dev", '["/usr/bin/prog", "-v"]', f"{prog}:/usr/bin/prog:750")
    assert r.returncode == 0, r.stderr
    with tarfile.open(out) as t:
        manifest = json.load(t.extractfile("manifest.json"))
        assert manifest[0]["RepoTags"] == ["localhost/prog:dev"]
        config_bytes = t.extractfile(manifest[0]["Config"]).read()
        layer = t.extractfile(manifest[0]["Layers"][0]).read()
    # the image ID is the config's digest, and the config names the layer by its digest
    assert manifest[0]["Config"] == hashlib.sha256(config_bytes).hexdigest() + ".json"
    assert r.stdout.split()[-1] == "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    config = json.loads(config_bytes)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"]["Entrypoint"] == ["/usr/bin/prog", "-v"] and config["os"] == "linux"
    with tarfile.open(fileobj=io.BytesIO(layer)) as lt:
        members = {m.name: m for m in lt.getmembers()}
        assert list(members) == ["usr", "usr/bin", "usr/bin/prog"]
        f = members["usr/bin/prog"]
        assert (f.mode, f.uid, f.mtime, f.isfile()) == (0o750, 0, 0, True)
        assert lt.extractfile(f).read() == prog.read_bytes()
    # the same inputs give the same image
    again = _mkimage(
        str(tmp_path / "again.tar"), "localhost/prog:dev", '["/usr/bin/prog", "-v"]', f"{prog}:/usr/bin/prog:750"
    )
    assert again.stdout.split()[-1] == r.stdout.split()[-1]


def test_mkimage_labels_the_image_and_the_cluster_images_say_version_and_source(tmp_path):
    """--label lands in the config (so in the image ID: a new version is a new image), and
    the local cluster's collector images carry the package version and the source."""
    from gmpanalysis import __version__
    from gmpanalysis.kube.local import image_labels

    prog = tmp_path / "p"
    prog.write_bytes(b"x")
    labels = image_labels("gmp-sampler")
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.source"].startswith("https://github.com/")
    args = [x for k, v in labels.items() for x in ("--label", f"{k}={v}")]
    r = _mkimage(*args, str(tmp_path / "a.tar"), "localhost/p:dev", "/p", f"{prog}:/p")
    assert r.returncode == 0, r.stderr
    with tarfile.open(tmp_path / "a.tar") as t:
        m = json.load(t.extractfile("manifest.json"))[0]
        assert json.load(t.extractfile(m["Config"]))["config"]["Labels"] == labels
    plain = _mkimage(str(tmp_path / "b.tar"), "localhost/p:dev", "/p", f"{prog}:/p")
    assert plain.stdout.split()[-1] != r.stdout.split()[-1]
    bad = _mkimage("--label", "nokey", str(tmp_path / "c.tar"), "localhost/p:dev", "/p", f"{prog}:/p")
    assert "KEY=VALUE" in bad.stderr


def test_mkimage_entrypoint_as_a_path_and_refusals(tmp_path):
    prog = tmp_path / "p"
    prog.write_bytes(b"x")
    r = _mkimage(str(tmp_path / "a.tar"), "localhost/p:dev", "/p", f"{prog}:/p")
    assert r.returncode == 0, r.stderr
    with tarfile.open(tmp_path / "a.tar") as t:
        m = json.load(t.extractfile("manifest.json"))[0]
        assert json.load(t.extractfile(m["Config"]))["config"]["Entrypoint"] == ["/p"]
    assert "give NAME:TAG" in _mkimage(str(tmp_path / "b.tar"), "localhost/p", "/p", f"{prog}:/p").stderr
    assert "no such file" in _mkimage(str(tmp_path / "c.tar"), "localhost/p:dev", "/p", f"{tmp_path}/nope:/p").stderr
    assert "SRC:/DEST" in _mkimage(str(tmp_path / "d.tar"), "localhost/p:dev", "/p", f"{prog}:p").stderr


@pytest.mark.parametrize("script", sorted(p.name for p in CLUSTER.glob("*.sh")))
def test_cluster_scripts_parse(script):
    r = subprocess.run(["bash", "-n", str(CLUSTER / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
