"""Locate or build the Go collector binaries (gmp-sampler, gmp-demoapp and its variants,
gmp-agent, gmp-loadgen, gmp-tracedump, gmp-spinner, gmp-tracepeer).

The Go sources come from a source checkout (``collectors/``) or, in an installed package,
from the copy the wheel carries (``gmpanalysis/_collectors``). Either is built once per
source content and Go version into the user's cache directory.

The lab runs these programs as root, so a cached build is trusted only as far as it can be
checked: the SHA-256 of every built file is written beside them (``SHA256SUMS``) when they
are built and compared before every use, and the cache directories and files must belong
to the running user (or root) and be writable by no one else. A build that fails the check
is rebuilt (if this user owns it) or refused with a LabError naming the path and the fix.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import LabError
from .sources import build_inputs

# built by ``go build ./cmd/...`` in the collectors module
CMDS = ("gmp-sampler", "gmp-agent", "gmp-demoapp", "gmp-loadgen", "gmp-tracedump", "gmp-spinner", "gmp-tracepeer")
# the demo app built by modules of their own under collectors/ (the main module's go line
# and imports decide how the Go runtime picks GOMAXPROCS): program -> module directory
VARIANTS = {
    "gmp-demoapp-go124": "variants/go124",  # go 1.24 line: GOMAXPROCS = CPUs, limits ignored
    "gmp-demoapp-automaxprocs": "variants/automaxprocs",  # GOMAXPROCS = max(1, floor(quota/period))
}
PROGRAMS = CMDS + tuple(VARIANTS)

CHECKOUT_SOURCE = Path(__file__).resolve().parents[2] / "collectors"
PACKAGED_SOURCE = Path(__file__).resolve().parents[1] / "_collectors"
STANDARD_GO = "/usr/local/go/bin/go"


def collectors_dir() -> Path | None:
    """The collectors Go module: $GMP_COLLECTORS, else ``collectors/`` of a source checkout,
    else the sources an installed package carries; None if there is none."""
    env = os.environ.get("GMP_COLLECTORS")
    if env:
        return Path(env)
    for src in (CHECKOUT_SOURCE, PACKAGED_SOURCE):
        if (src / "go.mod").is_file():
            return src
    return None


def build_input_paths(src: Path) -> list[Path]:
    """What ``go build`` reads under ``src`` (absolute paths); the selection is sources.py's."""
    return [src / rel for rel in build_inputs(src)]


def source_hash(src: Path, go_version: str = "") -> str:
    """Content hash of the build inputs and the Go version that builds them: the cache key."""
    h = hashlib.sha256(go_version.encode() + b"\0")
    for p in build_input_paths(src):
        h.update(p.relative_to(src).as_posix().encode() + b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def required_go(src: Path) -> str:
    """The ``go`` line of the collectors' go.mod (the oldest Go that builds them), e.g. "1.26.0"."""
    m = re.search(r"^go\s+(\S+)", (src / "go.mod").read_text(), re.MULTILINE)
    return m.group(1) if m else "?"


def find_go() -> str | None:
    """The go command: on PATH, or the standard install location."""
    return shutil.which("go") or (STANDARD_GO if os.access(STANDARD_GO, os.X_OK) else None)


# the per-file hashes written beside a build; its name in the cache key below keeps builds
# made before hashes were kept (and by older versions still in use) apart from checked ones,
# and so does the build flags' version (-trimpath since "trimpath")
SUMS = "SHA256SUMS"
_LAYOUT = "sha256sums-1-trimpath"


def _cache_base() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def _cache_root() -> Path:
    return _cache_base() / "gmpanalysis" / "bin"


def _unsafe(path: Path, *, want_dir: bool, sticky_ok: bool = False) -> str | None:
    """Why ``path`` cannot be trusted to hold programs run as root, or None: not there, a
    symlink, not a directory/regular file as wanted, owned by someone other than this user
    or root, or writable by group or others (``sticky_ok``: unless it is a sticky directory
    such as /tmp, where no one can rename or remove what another user made)."""
    try:
        st = path.lstat()
    except OSError as e:
        return f"{path}: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if want_dir and not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if not want_dir and not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid not in (os.geteuid(), 0):
        return f"{path} belongs to uid {st.st_uid}, not to this user ({os.geteuid()}) or root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _write_sums(d: Path) -> None:
    """Record the SHA-256 of every program in ``d`` (a fresh build) in ``d/SHA256SUMS``,
    in sha256sum's format, readable by ``sha256sum -c``."""
    lines = [f"{_file_sha256(d / p)}  {p}\n" for p in PROGRAMS]
    (d / SUMS).write_text("".join(lines))
    os.chmod(d / SUMS, 0o644)


def verify_build(d: Path) -> str | None:
    """Why the build in ``d`` may not be run, or None when every program's SHA-256 matches
    the one recorded at build time and ``d``, its files and its SUMS are this user's (or
    root's) and writable by no one else."""
    why = _unsafe(d, want_dir=True) or _unsafe(d / SUMS, want_dir=False)
    if why:
        return why
    try:
        recorded = dict(reversed(line.split("  ", 1)) for line in (d / SUMS).read_text().splitlines())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return f"{d / SUMS}: unreadable ({e})"
    for p in PROGRAMS:
        why = _unsafe(d / p, want_dir=False)
        if why:
            return why
        if p not in recorded:
            return f"{d / SUMS} has no hash for {p}"
        if _file_sha256(d / p) != recorded[p]:
            return f"{d / p} changed since it was built (its SHA-256 differs from {d / SUMS})"
    return None


def _safe_cache_dirs(root: Path) -> None:
    """Make the cache directories from the cache base down to ``root`` (mode 0700 where
    created), and refuse if any of them could let another user swap the binaries."""
    base = _cache_base()
    parts = root.relative_to(base).parts
    for d in [base] + [base.joinpath(*parts[: i + 1]) for i in range(len(parts))]:
        if not d.exists() and not d.is_symlink():
            try:
                d.mkdir(mode=0o700)
            except FileExistsError:
                pass  # another process made it meanwhile: checked below like any other
            except OSError as e:
                raise LabError(
                    f"{d}: cannot write the collectors' build cache there ({e.strerror}); set XDG_CACHE_HOME "
                    "to a writable directory, or GMP_BIN_DIR to a directory of prebuilt collector binaries"
                ) from e
        why = _unsafe(d, want_dir=True, sticky_ok=True)
        if why:
            raise LabError(
                f"the collectors' build cache is not safe to run programs from as this user: {why}; "
                f"fix it (chown $(id -u) {d}; chmod go-w {d}) or set XDG_CACHE_HOME to a directory only you "
                "can write"
            )


def _go_env() -> dict[str, str]:
    # static binaries; no go.work of the surroundings joins in, no VCS stamp and no build
    # directory in the file paths (-trimpath): the binaries depend only on what the cache
    # key hashes, and the same sources give the same bytes on any machine
    flags = os.environ.get("GOFLAGS", "") + " -buildvcs=false -trimpath"
    return dict(os.environ, CGO_ENABLED="0", GOWORK="off", GOFLAGS=flags)


def _go_version(go: str, src: Path) -> str:
    """The Go version that builds ``src`` (the toolchain go.mod selects, if newer than ``go``)."""
    r = subprocess.run([go, "env", "GOVERSION"], cwd=src, env=_go_env(), capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not r.stdout.strip():
        raise LabError(f"'{go} env GOVERSION' in {src} failed:\n{r.stderr.strip()}")
    return r.stdout.strip()


def _build(go: str, src: Path, out: Path) -> None:
    """Build every program into ``out``: into a fresh directory beside it that is renamed
    when all builds succeeded, so ``out`` never holds a partial set."""
    _safe_cache_dirs(out.parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))  # mode 0700
    except OSError as e:
        raise LabError(
            f"{out.parent}: cannot write the collectors' build cache there ({e.strerror}); set XDG_CACHE_HOME "
            "to a writable directory, or GMP_BIN_DIR to a directory of prebuilt collector binaries"
        ) from e
    try:
        builds = [(src, [go, "build", "-o", str(tmp) + "/", "./cmd/..."])]
        builds += [(src / mod, [go, "build", "-o", str(tmp / prog), "."]) for prog, mod in VARIANTS.items()]
        for cwd, cmd in builds:
            r = subprocess.run(cmd, cwd=cwd, env=_go_env(), capture_output=True, text=True)
            if r.returncode != 0:
                raise LabError(f"building the collectors in {cwd} failed:\n{r.stderr.strip()}")
        for p in PROGRAMS:
            os.chmod(tmp / p, 0o755)  # whatever the umask: writable by this user only
        _write_sums(tmp)
        if out.exists():
            shutil.rmtree(out)  # an incomplete or unverifiable set: rebuilt whole
        try:
            tmp.rename(out)
        except OSError:
            # another process finished the same build first: theirs is complete
            if not all(os.access(out / p, os.X_OK) for p in PROGRAMS):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_binaries(bin_dir: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Return {program: path}, building the collectors with ``go build`` when needed.

    Order: ``bin_dir`` or $GMP_BIN_DIR if given (prebuilt); else a build of the collectors'
    sources (see :func:`collectors_dir`) cached under
    ``$XDG_CACHE_HOME/gmpanalysis/bin/<hash of the sources and the Go version>``
    (``~/.cache`` without XDG_CACHE_HOME); else the programs on PATH. The first build
    downloads the Go modules the collectors use (through the Go module proxy or
    GOPROXY) and takes a minute or so.

    Every call checks what it returns (see :func:`verify_build`): a cached build's files
    against the SHA-256 recorded when they were built, and that no other user can write
    them; a prebuilt directory (``bin_dir``) the same way when it holds a SHA256SUMS, and its
    ownership and modes always. Programs found on PATH are trusted as PATH is.
    """
    explicit = bin_dir or os.environ.get("GMP_BIN_DIR")
    if explicit:
        d = Path(explicit)
        found = {p: d / p for p in PROGRAMS}
        missing = [p for p, f in found.items() if not os.access(f, os.X_OK)]
        if missing:
            raise LabError(
                f"{d}: missing collector binaries {', '.join(missing)}; build them with "
                f"'cd collectors && go build -o {d}/ ./cmd/...' and, in each of "
                + ", ".join(f"collectors/{m}" for m in VARIANTS.values())
                + f", 'go build -o {d}/<program> .' ({', '.join(VARIANTS)})"
            )
        if (d / SUMS).exists():
            why = verify_build(d)
        else:
            why = next(
                (w for w in [_unsafe(d, want_dir=True)] + [_unsafe(f, want_dir=False) for f in found.values()] if w),
                None,
            )
        if why is not None:
            raise LabError(
                f"GMP_BIN_DIR {d}: the collector binaries cannot be trusted to run as this user: {why}; "
                f"make them yours and writable only by you (chmod go-w), or rebuild them"
            )
        return found
    src = collectors_dir()
    if src is not None:
        go = find_go()
        if go is None:
            raise LabError(
                f"the Go toolchain is needed to build the collectors from {src} (go is neither on PATH nor at "
                f"{STANDARD_GO}): install Go >= {required_go(src)} (https://go.dev/doc/install) and put it on "
                "PATH, or set GMP_BIN_DIR to a directory of prebuilt collector binaries "
                f"({', '.join(PROGRAMS)})"
            )
        gover = _go_version(go, src)
        root = _cache_root()
        out = root / source_hash(src, gover + "\0" + _LAYOUT)
        found = {p: out / p for p in PROGRAMS}
        _safe_cache_dirs(root)
        why = verify_build(out) if out.exists() or out.is_symlink() else "not built yet"
        if why is not None:
            if (out.exists() or out.is_symlink()) and _unsafe(out, want_dir=True) is not None:
                # not ours to remove: another user's directory, or a symlink planted there
                raise LabError(
                    f"the collectors' build cache cannot be trusted: {why}; remove {out} (as its owner or "
                    "root) or set XDG_CACHE_HOME to a directory only you can write"
                )
            print(
                f"gmpanalysis: building the collectors from {src} with {gover} into {out} "
                f"(once per source and Go version; {why})",
                file=sys.stderr,
                flush=True,
            )
            _build(go, src, out)
            why = verify_build(out)
            if why is not None:
                raise LabError(f"the collectors just built do not verify: {why}; remove {out} and try again")
        return found
    found_on_path = {p: shutil.which(p) for p in PROGRAMS}
    if all(found_on_path.values()):
        return {p: Path(f) for p, f in found_on_path.items() if f}
    raise LabError(
        "collector binaries not found: no collectors' Go sources (a source checkout's collectors/, or "
        f"{PACKAGED_SOURCE} in an installed package: reinstall gmpanalysis), set GMP_COLLECTORS to the "
        "collectors module, or GMP_BIN_DIR to a directory of built binaries"
    )
