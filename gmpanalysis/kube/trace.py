"""The Go execution trace of the target, fetched through a port-forward."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from ..errors import CollectError
from .api import api_call, private
from .config import CollectConfig

BODY_SHOWN = 300  # bytes of a refusal's body quoted in the error
# a forwarded connection that closes at once is retried: a just-started process may not
# listen yet (ATTEMPTS in all, 0.5 s apart); a connection the API server says was refused
# inside the pod is retried REFUSED_ATTEMPTS times, 1 s apart (a process still starting
# gets ~4 s, as before), then reported: nothing listens on that port
ATTEMPTS = 8
REFUSED_ATTEMPTS = 4
PROXY_THREAD = "Kubernetes port forward proxy"
_OURS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # the proxy threads of this module's forwards
_HOOK_LOCK = threading.Lock()


def quiet_proxy_threads() -> None:
    """The kubernetes client's port-forward proxy thread raises (SSLEOFError, a closed
    websocket) when the forward is closed under it; its traceback would be printed into the
    collector's output. The failure itself reaches the reader through the stream (and is
    reported there), so that exception is dropped, for the proxy threads of this module's
    own forwards only; any other exception, and every other thread's, goes to the hook as
    before."""
    with _HOOK_LOCK:
        prev = threading.excepthook
        if getattr(prev, "_gmp_quiet_proxy", False):
            return

        def hook(args: Any) -> None:
            t = args.thread
            closed = isinstance(args.exc_value, (OSError, EOFError)) or type(args.exc_value).__module__.startswith(
                "websocket"
            )
            if t is not None and t in _OURS and t.name.startswith(PROXY_THREAD) and closed:
                return
            prev(args)

        hook._gmp_quiet_proxy = True  # type: ignore[attr-defined]
        threading.excepthook = hook


def _forward(core: Any, cfg: CollectConfig, pod: str) -> Any:
    """A port-forward to the pprof port, its proxy thread noted as ours."""
    from kubernetes.stream import portforward

    before = set(threading.enumerate())
    pf = api_call(
        portforward,
        "create",
        "pods/portforward",
        cfg.namespace,
        private(core).connect_get_namespaced_pod_portforward,
        pod,
        cfg.namespace,
        ports=str(cfg.pprof_port),
    )
    for t in threading.enumerate():
        if t not in before and t.name.startswith(PROXY_THREAD):
            _OURS.add(t)
    return pf


def refused(pf: Any, port: int, wait_s: float = 0.3) -> str | None:
    """The API server's word that the connection to ``port`` was refused inside the pod
    (its port-forward error channel), or None. The message can trail the closed stream."""
    end = time.monotonic() + wait_s
    while True:
        err = pf.error(port)
        if err:
            return err if "refused" in err else None
        if time.monotonic() >= end:
            return None
        time.sleep(0.05)


def nothing_listens(pod: str, port: int, said: str) -> CollectError:
    return CollectError(
        f"nothing listens on port {port} in pod {pod} (the API server: {said.strip()}); give --pprof-port the "
        "port net/http/pprof serves on (the pod's gmpanalysis/pprof-port annotation or the server's flags say "
        "which), or --pprof-port 0 to collect without a trace"
    )


def trace_request(cfg: CollectConfig, window_s: float) -> tuple[str, str]:
    """(path with query, Host header) of the trace request. The Host is the host:port the
    forward dialled inside the pod (127.0.0.1:PORT) unless ``pprof_host`` says otherwise:
    admin endpoints that check it refuse a bare "localhost"."""
    sep = "&" if "?" in cfg.pprof_path else "?"
    host = cfg.pprof_host or f"127.0.0.1:{cfg.pprof_port}"
    return f"{cfg.pprof_path}{sep}seconds={window_s:.0f}", host


def get_trace(sock: socket.socket, cfg: CollectConfig, window_s: float, dest: Path, res: dict[str, Any]) -> None:
    """Ask for the trace over a connected stream and append the body to ``dest`` as it
    arrives (HTTP/1.1 by the standard library, chunked or not). A refusal raises
    :class:`CollectError` quoting the server's answer."""
    path, host = trace_request(cfg, window_s)
    conn = http.client.HTTPConnection(host, timeout=window_s + 30)
    conn.sock = sock  # the forwarded stream instead of a TCP connect
    sock.settimeout(window_s + 30)
    conn.request("GET", path, headers={"Host": host, "Connection": "close", "Accept-Encoding": "identity"})
    resp = conn.getresponse()
    res["http_status_line"] = f"HTTP/{resp.version / 10:.1f} {resp.status} {resp.reason}"
    if resp.status != 200:
        body = resp.read(BODY_SHOWN).decode("utf-8", "replace").strip()
        hint = {
            403: "the server refused the request: pass --pprof-host with the host:port it accepts",
            404: "nothing is served at that path: is net/http/pprof mounted there (--pprof-path)?",
        }.get(resp.status, "see the server's answer")
        raise CollectError(f"GET {path} (Host: {host}) answered {resp.status} {resp.reason}: {body!r}; {hint}")
    with open(dest, "ab") as out:
        try:
            while data := resp.read1(1 << 16):
                out.write(data)
                out.flush()
        except http.client.IncompleteRead as e:  # the forward dropped inside the body
            out.write(e.partial)
            raise CollectError(f"connection closed inside the body after {dest.stat().st_size} bytes") from None


def fetch_trace(core: Any, cfg: CollectConfig, pod: str, seconds: float, dest: Path, res: dict[str, Any]) -> None:
    """Port-forward to the pprof port and stream the trace body to dest as it arrives."""
    res["mono_request_ns"] = time.monotonic_ns()
    end = time.monotonic() + seconds
    quiet_proxy_threads()
    try:
        refusals = 0
        for attempt in range(ATTEMPTS):
            pf = _forward(core, cfg, pod)
            try:
                res["attempts"] = attempt + 1
                get_trace(pf.socket(cfg.pprof_port), cfg, max(1.0, end - time.monotonic()), dest, res)
                break
            except (http.client.RemoteDisconnected, ConnectionError):
                # retry only while nothing arrived: bytes on disk are never rewritten or doubled
                if dest.exists() and dest.stat().st_size:
                    raise
                said = refused(pf, cfg.pprof_port)
                pf.close()
                refusals += said is not None
                if said is not None and refusals >= REFUSED_ATTEMPTS:
                    raise nothing_listens(pod, cfg.pprof_port, said) from None
                if attempt == ATTEMPTS - 1:
                    raise
                time.sleep(1.0 if said is not None else 0.5)
        res["complete"] = True
        err = pf.error(cfg.pprof_port)
        if err:
            res["port_forward_error"] = err
    except CollectError as e:  # said in full already
        res["complete"] = False
        res["error"] = str(e)
    except Exception as e:  # noqa: BLE001 - a worker thread: every failure is recorded, none escapes
        res["complete"] = False
        res["error"] = f"port {cfg.pprof_port}: {type(e).__name__}: {e}"
    res["mono_done_ns"] = time.monotonic_ns()
    res["bytes"] = dest.stat().st_size if dest.exists() else 0
