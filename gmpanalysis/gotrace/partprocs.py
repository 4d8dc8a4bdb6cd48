"""The processes that read parts of a trace for :mod:`gotrace.parallel`: started once,
kept for the reads to come, each given a part through a file of the reading process.

A part's process is a Python of its own, started with subprocess (posix_spawn or vfork: none
of the reading process's threads, locks or fork handlers reach it; OpenBLAS's fork handler
deadlocks when another thread is in a BLAS call at a fork, and a notebook kernel has
threads). It opens the trace through the reading process's file descriptor
(``/proc/PID/fd``) and writes what it built over its job, in an in-memory file (``memfd``)
of the reading process, as a pickle whose arrays follow it raw, read back as views.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import mmap
import os
import pickle
import select
import subprocess
import sys
import threading
import time
import warnings
from typing import Any

import numpy as np

from ..errors import GmpWarning
from .memory import PageDropper, trim
from .part import Feeder, read_part
from .wire import Generation

# A part's process is a Python of its own, started with subprocess (posix_spawn or vfork:
# none of this process's threads, locks or fork handlers reach it), isolated (-I: no
# environment variables, user site or current directory on its path) and given this
# process's sys.path, so that it runs the same code; kept for the reads to come until it has
# waited IDLE_S for one (each holds about 145 MiB meanwhile, 57 MiB of it its own). It loads
# the reader's modules alone: the packages' __init__ (the library's API: pandas, pyarrow)
# are not run, as a part builds rows, not frames (38 MiB less of its own memory, and 33 MiB
# less of mapped libraries).
IDLE_S = 60.0
WORKER = (
    "import sys, json, importlib.util as u; a = json.loads(sys.argv[1]); sys.path[:] = a['path']\n"
    "for n in ('gmpanalysis', 'gmpanalysis.gotrace'): sys.modules[n] = u.module_from_spec(u.find_spec(n))\n"
    "from gmpanalysis.gotrace.partprocs import serve; serve(a['idle_s'], a['parent'])"
)
# how long the parts' processes may take past the end of this process's own part: this many
# seconds, and this many times what this process took for it
WAIT_S = 60.0
WAIT_PER_PART = 20.0
# the line a part's process answers with (other lines on its stdout are not its answer)
ANSWER = b"gmpanalysis-part "
# how often a part's process looks whether the reading process is still there
WATCH_S = 1.0


class Pool:
    """The parts' processes of this process, one read at a time (a read that finds them busy,
    in another thread, is read on one core)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.lock = threading.Lock()

    def take(self, n: int) -> list[subprocess.Popen] | None:
        """``n`` processes, started where too few are left; None when another thread has
        them, or they cannot be started (the trace is then read on one core)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            for p in self.procs:
                if p.poll() is not None:  # ended (idle): reaped
                    _end(p)
            self.procs = [p for p in self.procs if p.returncode is None]
            while len(self.procs) < n:
                self.procs.append(_spawn())
        except (OSError, ValueError):  # no executable, no file descriptors left, ...
            self.lock.release()
            return None
        except BaseException:
            self.lock.release()
            raise
        return self.procs[:n]

    def end(self) -> None:
        """End every process (at exit: they would end by themselves once stdin closes)."""
        for p in self.procs:
            _end(p)
        self.procs = []

    def give_back(self, used: list[subprocess.Popen], clean: bool) -> None:
        """After a read; ``clean``: each process answered its part (the others may still be
        working on one: ended)."""
        try:
            if not clean:
                for p in used:
                    _end(p)
                self.procs = [p for p in self.procs if p not in used]
        finally:
            self.lock.release()


POOL = Pool()
atexit.register(POOL.end)


def _spawn() -> subprocess.Popen:
    # the same gmpanalysis, wherever this process found it ("" is this process's directory
    # at its start, as here)
    path = [os.path.abspath(p) if p == "" else p for p in sys.path if isinstance(p, str)]
    arg = json.dumps({"path": path, "idle_s": IDLE_S, "parent": os.getpid()})
    return subprocess.Popen(
        [sys.executable, "-I", "-c", WORKER, arg],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def _end(p: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        p.kill()
    with contextlib.suppress(Exception):
        p.wait()
    for f in (p.stdin, p.stdout):
        with contextlib.suppress(Exception):
            f.close()  # type: ignore[union-attr]


class Workers:
    """The parts but the first, each given to a process of :data:`POOL`, which writes what it
    built to a memfd of this process."""

    def __init__(
        self,
        parts: list[list[list[Generation]]],
        want: frozenset[str],
        version: int,
        source: str,
        feed: Feeder,
    ) -> None:
        self.parts, self.want, self.version, self.source = parts, want, version, source
        self.keep, self.need = feed.keep, feed.need
        self.procs: dict[int, subprocess.Popen] = {}
        self.used: list[subprocess.Popen] | None = None
        self.fds: dict[int, int] = {}
        self.data_fd: int | None = None
        self.answered = 0

    def start(self, data: bytes, fd: int | None) -> bool:
        """Give each part to a process; False when none are free (another thread reads)."""

        self.used = POOL.take(len(self.parts) - 1)
        if self.used is None:
            return False
        try:
            self._give(data, fd)
        except OSError:  # no memory files or descriptors left: read on one core
            return False
        return True

    def _give(self, data: bytes, fd: int | None) -> None:
        from . import kernels

        assert self.used is not None
        if fd is None:  # bytes given: the processes read a copy in memory
            fd = self.data_fd = os.memfd_create("gmpanalysis-trace", os.MFD_CLOEXEC)
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(data)
        me = os.getpid()
        for k, p in enumerate(self.used, start=1):
            self.fds[k] = os.memfd_create(f"gmpanalysis-trace-part{k}", os.MFD_CLOEXEC)
            job = {
                "data": f"/proc/{me}/fd/{fd}",
                "out": f"/proc/{me}/fd/{self.fds[k]}",
                "version": self.version,
                "source": self.source,
                "chunks": self.parts[k],
                "warm": self.parts[k - 1][-1][-1],  # the generation before the part
                "want": self.want,
                "keep": self.keep,
                "need": self.need,
                "compiled": kernels.ENABLED,
            }
            # the job through the part's own file: the pipe carries one line, and never blocks
            with os.fdopen(self.fds[k], "wb", closefd=False) as f:
                pickle.dump(job, f, protocol=pickle.HIGHEST_PROTOCOL)
            self.procs[k] = p
            with contextlib.suppress(OSError):  # one gone: its part is read again on one core
                p.stdin.write(f"{job['out']}\n".encode())  # type: ignore[union-attr]
                p.stdin.flush()  # type: ignore[union-attr]

    def result(self, k: int, deadline: float) -> tuple[dict[str, Any] | None, mmap.mmap | None]:
        """Part k as its process built it (None: it failed, warned, or has not answered by
        ``deadline``, time.monotonic()), its arrays views of the mapped file given beside it
        (close it once they are used)."""
        p = self.procs.pop(k)
        out = p.stdout
        assert out is not None
        said = b""
        while True:  # its answer; lines before it are not ours (a module that prints)
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                break
            line = out.readline()
            if not line or line.startswith(ANSWER):
                said = line
                break
        self.answered += bool(said)
        fd = self.fds.pop(k)
        try:
            if said != ANSWER + b"1\n":
                return None, None
            try:
                return load(fd)
            except Exception:  # not what a part's process writes: read on one core
                return None, None
        finally:
            os.close(fd)

    def stop(self) -> None:
        """Free the processes (those still working on a part, after an error, an interrupt
        or a timeout here, are ended first) and then the files."""
        if self.used is not None:
            POOL.give_back(self.used, clean=self.answered == len(self.used))
        for fd in [*self.fds.values(), *([self.data_fd] if self.data_fd is not None else [])]:
            os.close(fd)
        self.procs, self.fds, self.data_fd, self.used = {}, {}, None, None


def serve(idle_s: float, parent: int) -> None:  # pragma: no cover (a part's process; what it writes is checked)
    """A part's process: for each line on stdin (the path of a file holding a job, where it
    also writes what it built), read the part and answer ANSWER + "1" (written) or "0"
    (failed or warned: the trace is then read again on one core); exit after ``idle_s``
    without a job, or when stdin closes; and at once, mid-job too, once the reading process
    ``parent`` is gone."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    threading.Thread(target=_end_when_orphaned, args=(parent,), name="gmp-part-watch", daemon=True).start()
    while True:
        ready, _, _ = select.select([stdin], [], [], idle_s)
        if not ready:
            return
        line = stdin.readline()
        if not line:
            return
        try:
            ok = part_process(line.decode().strip())
        except Exception:
            ok = False
        stdout.write(ANSWER + (b"1\n" if ok else b"0\n"))
        stdout.flush()
        trim()


def _end_when_orphaned(ppid: int) -> None:  # pragma: no cover (a part's process; tested from outside)
    # the closed pipe of a reading process that died is seen between jobs only, and a job
    # can take seconds (one part of a long trace): nothing will read what it builds, so the
    # process ends as soon as it is reparented
    while os.getppid() == ppid:
        time.sleep(WATCH_S)
    os._exit(0)


def part_process(path: str) -> bool:  # pragma: no cover (see serve)
    """Read the part the job at ``path`` names and write what it built over the job (the
    file opened once, at the start); False when reading it failed or warned."""
    from . import kernels

    with open(path, "r+b") as out:
        job = pickle.load(out)
        kernels.ENABLED = job["compiled"]
        with open(job["data"], "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        buf = np.frombuffer(data, dtype=np.uint8)
        version, source = job["version"], job["source"]
        feed = Feeder(data, buf, version, source, job["keep"], job["need"])
        release = PageDropper(data)  # the pages read: dropped from this process
        with warnings.catch_warnings(record=True) as caught:  # (this process has one thread)
            warnings.simplefilter("always")
            got = read_part(
                data, buf, version, source, job["chunks"], job["want"], feed, warm=job["warm"], release=release
            )
        del buf
        # the reader's own warnings only (another library's, say a deprecation, are not the trace's)
        if got is None or any(issubclass(w.category, GmpWarning) for w in caught):
            return False
        out.seek(0)
        out.truncate(0)
        dump(out.fileno(), got)
    return True


# arrays are written after the pickle at offsets of this alignment (numpy's fast paths
# want aligned data)
ALIGN = 64


def dump(fd: int, obj: object) -> None:
    """Write ``obj`` to the file: a pickle whose arrays follow it raw (protocol 5's
    out-of-band buffers), so that they are read back as views, not copies."""
    bufs: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    sizes = [r.nbytes for r in raws]
    top = np.array([len(head), len(raws), *sizes], dtype=np.int64).tobytes()
    with os.fdopen(fd, "wb", closefd=False) as f:
        f.write(top)
        f.write(head)
        at = len(top) + len(head)
        for r in raws:
            pad = -at % ALIGN
            f.write(bytes(pad))
            f.write(r)
            at += pad + r.nbytes


def load(fd: int) -> tuple[object, mmap.mmap | None]:
    """What :func:`dump` wrote, and the mapping its arrays are views of."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, None
    mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    n_head, n_buf = (int(x) for x in np.frombuffer(view[:16], dtype=np.int64))
    sizes = np.frombuffer(view[16 : 16 + 8 * n_buf], dtype=np.int64).tolist()
    at = 16 + 8 * n_buf
    head = view[at : at + n_head]
    at += n_head
    bufs = []
    for n in sizes:
        at += -at % ALIGN
        bufs.append(view[at : at + n])
        at += n
    obj = pickle.loads(head, buffers=bufs)
    del head, bufs, view
    return obj, mm
