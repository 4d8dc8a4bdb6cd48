#!/usr/bin/env python3
"""Make a container image from local files, as a docker-archive tarball that
``ctr -n k8s.io images import`` loads into the node's containerd: no Docker, no registry.

    scripts/cluster/mkimage.py [--label KEY=VALUE ...] OUT.tar NAME:TAG ENTRYPOINT SRC:DEST[:MODE] ...

ENTRYPOINT is a path in the image ("/gmp-sampler") or a JSON list ('["/pause", "-v"]').
Each SRC:DEST[:MODE] puts the local file SRC at DEST in the image (MODE in octal, default
755). ``--label`` puts a label in the image's config (the OCI annotations, e.g.
``org.opencontainers.image.version``). The image has one layer; the files are owned by root
with mtime 0, so the same inputs give the same image ID. Standard library only: runs under any python3.

The archive layout (what ``docker save`` writes): ``manifest.json`` lists, per image, its
config file and its layer tarballs; the config's ``rootfs.diff_ids`` holds the sha256 of each
UNCOMPRESSED layer tar, which is how the runtime checks the layers it unpacks.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import sys
import tarfile
from pathlib import Path

# Go's GOARCH names, which image configs use, for the machine names Python reports
ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


def _layer(files: list[tuple[Path, str, int]]) -> bytes:
    """One layer tarball holding ``files`` (source, path in the image, mode) and their
    parent directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made: set[str] = set()
        for src, dest, mode in files:
            rel = dest.strip("/")
            parts = rel.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in made:
                    made.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = src.stat().st_size, mode, 0
            with open(src, "rb") as f:
                tar.addfile(info, f)
    return buf.getvalue()


def build_image(
    out: Path, ref: str, entrypoint: list[str], files: list[tuple[Path, str, int]], labels: dict[str, str] | None = None
) -> str:
    """Write the image ``ref`` (NAME:TAG) to ``out`` as a docker-archive, with ``labels`` in
    its config; returns its image ID (the sha256 of its config)."""
    if ":" not in ref.rsplit("/", 1)[-1]:
        raise SystemExit(f"mkimage: {ref!r}: give NAME:TAG (an untagged image is not imported by name)")
    layer = _layer(files)
    config = {
        "architecture": ARCH.get(platform.machine(), platform.machine()),
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Entrypoint": entrypoint,
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "WorkingDir": "/",
            **({"Labels": dict(labels)} if labels else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    image_id = hashlib.sha256(config_bytes).hexdigest()
    manifest = [{"Config": f"{image_id}.json", "RepoTags": [ref], "Layers": ["layer.tar"]}]
    members = (
        (f"{image_id}.json", config_bytes),
        ("layer.tar", layer),
        ("manifest.json", json.dumps(manifest).encode()),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return "sha256:" + image_id


def _file_spec(spec: str) -> tuple[Path, str, int]:
    src, sep, rest = spec.partition(":")
    dest, _, mode = rest.partition(":")
    if not sep or not dest.startswith("/"):
        raise SystemExit(f"mkimage: {spec!r}: expected SRC:/DEST[:MODE]")
    path = Path(src)
    if not path.is_file():
        raise SystemExit(f"mkimage: {src}: no such file")
    return path, dest, int(mode, 8) if mode else 0o755


def main(argv: list[str]) -> int:
    labels: dict[str, str] = {}
    while len(argv) >= 2 and argv[0] == "--label":
        key, sep, value = argv[1].partition("=")
        if not sep or not key:
            raise SystemExit(f"mkimage: --label {argv[1]!r}: expected KEY=VALUE")
        labels[key] = value
        argv = argv[2:]
    if len(argv) < 4 or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out, ref, entry, *specs = argv
    entrypoint = json.loads(entry) if entry.startswith("[") else [entry]
    image_id = build_image(Path(out), ref, entrypoint, [_file_spec(s) for s in specs], labels)
    print(f"{out} {ref} {image_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
