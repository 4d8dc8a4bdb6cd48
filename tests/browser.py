"""A real JupyterLab server and a real headless Chromium, for tests that open notebooks the
way a user does.

Chromium is driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``:
JSON messages separated by NUL bytes on file descriptors 3 and 4), so no debugging port is
opened and no Python package beyond the standard library is needed. Both programs are started
in their own process group and ended by PID (and that group) whatever happens.
"""

from __future__ import annotations

import base64
import fcntl
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def jupyterlab_installed() -> bool:
    return importlib.util.find_spec("jupyterlab") is not None


def wait_for(
    cond: Callable[[], Any], timeout: float, what: str, *, every: float = 0.1, alive: Callable[[], None] | None = None
):
    """Poll ``cond`` until it returns something truthy (returned), or fail after ``timeout`` s
    saying what was awaited. ``alive`` is called each round and raises if the thing awaited died."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        if alive is not None:
            alive()
        last = cond()
        if last:
            return last
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}; last state: {last!r}")
        time.sleep(every)


def _end_group(proc: subprocess.Popen, grace: float) -> None:
    """End a process started with start_new_session=True: SIGTERM to its PID, then SIGKILL to
    its process group (the children it started) if it has not gone within ``grace`` seconds."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(grace)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group id is the PID of the process we started
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(10)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses


def _children(pid: int) -> list[tuple[int, str]]:
    """(PID, start time) of each process whose parent is ``pid``."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            f = _stat(int(d.name))
            if f is not None and int(f[1]) == pid:
                out.append((int(d.name), f[19]))
    return out


class CdpError(RuntimeError):
    pass


class Chromium:
    """Headless Chromium with one page, driven over the DevTools pipe."""

    def __init__(self, exe: str, profile: Path, *, width: int = 1400, height: int = 1000) -> None:
        self.width, self.height = width, height
        self.log = profile.parent / "chromium.log"
        args = [
            exe,
            "--headless=new",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--mute-audio",
            # a page nobody looks at is still the one under test: no throttled timers or frames
            "--disable-background-timer-throttling",
            "--disable-backgrounding-occluded-windows",
            "--disable-renderer-backgrounding",
            "--no-proxy-server",  # the server is on 127.0.0.1, whatever proxy the environment names
        ]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses to start its sandbox as root
        args.append("about:blank")
        r, self._to_browser = os.pipe()
        self._from_browser, w = os.pipe()
        # the browser's ends, moved clear of 3 and 4 (close-on-exec), become 3 and 4 in the browser
        to_browser_r, from_browser_w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5) for fd in (r, w))
        os.close(r)
        os.close(w)

        def as_fds_3_and_4() -> None:
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                close_fds=False,  # keeps 3 and 4; every other descriptor of ours is close-on-exec
                preexec_fn=as_fds_3_and_4,
                start_new_session=True,
            )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._replies: dict[int, dict] = {}
        self._events: list[dict] = []
        self._cond = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, name="cdp-reader", daemon=True)
        self._reader.start()
        self.session_id: str | None = None

    # -- the protocol -------------------------------------------------------------------

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._eof = True
                    self._cond.notify_all()
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            with self._cond:
                for m in messages:
                    msg = json.loads(m)
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self._events.append(msg)
                self._cond.notify_all()

    def send(self, method: str, params: dict | None = None, *, page: bool = True, timeout: float = 30) -> dict:
        """One command; its result, or CdpError with the browser's message."""
        with self._cond:
            self._next_id += 1
            mid = self._next_id
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if page and self.session_id:
            msg["sessionId"] = self.session_id
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self._to_browser, data) :]
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._replies:
                if self._eof:
                    raise CdpError(f"{method}: Chromium closed the pipe (exit {self.proc.poll()}); see {self.log}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{method}: no reply from Chromium within {timeout} s")
                self._cond.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def events(self, method: str) -> list[dict]:
        with self._cond:
            return [e for e in self._events if e.get("method") == method]

    # -- the page -----------------------------------------------------------------------

    def open_page(self) -> None:
        """A page of the configured size, attached, with Runtime enabled."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, page=False)["targetId"]
        self.session_id = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, page=False)[
            "sessionId"
        ]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
        )

    def navigate(self, url: str) -> None:
        r = self.send("Page.navigate", {"url": url})
        if r.get("errorText"):
            raise CdpError(f"cannot open {url}: {r['errorText']}")

    def evaluate(self, expression: str, *, timeout: float = 30) -> Any:
        """Evaluate JavaScript in the page (promises awaited) and return its value as JSON."""
        r = self.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True, "timeout": timeout * 1000},
            timeout=timeout + 5,
        )
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise CdpError(f"JavaScript failed: {d.get('exception', {}).get('description') or d.get('text')}")
        return r["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise CdpError(f"Chromium exited with {self.proc.returncode}; see {self.log}")

    def close(self) -> None:
        """Browser.close, then the process and its group by PID."""
        try:
            if self.proc.poll() is None and not self._eof:
                self.send("Browser.close", page=False, timeout=5)
                self.proc.wait(5)
        except (CdpError, TimeoutError, OSError, subprocess.TimeoutExpired):
            pass
        finally:
            _end_group(self.proc, grace=5)
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass


class JupyterLab:
    """``python -m jupyterlab`` on 127.0.0.1, a free port chosen by the OS, a fresh token, and
    every Jupyter/IPython directory under ``home`` (nothing is written elsewhere). Starting it
    does not wait: :attr:`url` does, so a browser can start meanwhile."""

    def __init__(self, root_dir: Path, home: Path, *, timeout: float = 60) -> None:
        self.root_dir = root_dir
        self.token = secrets.token_hex(16)
        self.runtime = home / "runtime"
        env = dict(os.environ)
        for k in ("GMP_DATA", "MPLBACKEND", "JUPYTER_TOKEN", "JUPYTER_PORT"):
            env.pop(k, None)  # the defaults a user meets: the example runs, the inline backend
        env.update(
            JUPYTER_RUNTIME_DIR=str(self.runtime),
            JUPYTER_CONFIG_DIR=str(home / "config"),
            JUPYTER_DATA_DIR=str(home / "data"),
            IPYTHONDIR=str(home / "ipython"),
        )
        # no check whether installed extensions need a rebuild of the app: seconds of CPU at the
        # first page load, and nothing to do with notebooks
        (home / "config" / "labconfig").mkdir(parents=True)
        (home / "config" / "labconfig" / "page_config.json").write_text(
            '{"buildCheck": false, "buildAvailable": false}'
        )
        self.log = home / "jupyterlab.log"
        args = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            "--port=0",  # a free port chosen by the OS; the server writes it to its runtime file
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={root_dir}",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the app's command registry
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if os.geteuid() == 0:
            args.append("--allow-root")  # the server refuses root otherwise
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                args,
                cwd=root_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.timeout = timeout
        self._url: str | None = None

    @property
    def url(self) -> str:
        """The server's address, once it answers (waits for it the first time)."""
        if self._url is None:
            info = wait_for(self._info, self.timeout, "JupyterLab to write its server file", alive=self.alive)
            url = f"http://127.0.0.1:{info['port']}/"
            wait_for(
                lambda: self._request("GET", "api/status", url) == 200,
                self.timeout,
                f"{url}api/status",
                alive=self.alive,
            )
            self._url = url
        return self._url

    def _info(self) -> dict | None:
        f = self.runtime / f"jpserver-{self.proc.pid}.json"
        try:
            return json.loads(f.read_text())
        except (OSError, ValueError):  # not yet there, or half written
            return None

    def _request(self, method: str, path: str, url: str | None = None, timeout: float = 5) -> int:
        headers = {"Authorization": f"token {self.token}"}
        data = b"" if method == "POST" else None
        req = urllib.request.Request((url or self.url) + path, method=method, headers=headers, data=data)
        try:
            with _DIRECT.open(req, timeout=timeout) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (urllib.error.URLError, OSError):
            return 0

    def page(self, path: str) -> str:
        return f"{self.url}lab/tree/{path}?token={self.token}"

    def alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n{tail}")

    def close(self) -> None:
        """Ask the server to shut down (it ends its kernels), then end by PID whatever is left:
        the server, its process group, and the kernels it started (each in a session of its own)."""
        kernels = _children(self.proc.pid) if self.proc.poll() is None else []
        try:
            if self.proc.poll() is None and self._url and self._request("POST", "api/shutdown") == 200:
                self.proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
        finally:
            _end_group(self.proc, grace=5)
            for pid, started in kernels:
                f = _stat(pid)
                if f is not None and f[19] == started:  # still the same process, not a reused PID
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
