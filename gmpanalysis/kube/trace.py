"""The Go execution trace of the target, fetched through a port-forward."""

from __future__ import annotations

import http.client
import socket
import time
from pathlib import Path
from typing import Any

from ..errors import CollectError
from .api import _call, private
from .config import CollectConfig

BODY_SHOWN = 300  # bytes of a refusal's body quoted in the error


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


def _fetch_trace(core: Any, cfg: CollectConfig, pod: str, seconds: float, dest: Path, res: dict[str, Any]) -> None:
    """Port-forward to the pprof port and stream the trace body to dest as it arrives."""
    from kubernetes.stream import portforward

    res["mono_request_ns"] = time.monotonic_ns()
    end = time.monotonic() + seconds
    try:
        # a just-started process may not listen yet: the forwarded connection then closes at
        # once; retry for a few seconds, asking for the rest of the window each time
        for attempt in range(8):
            pf = _call(
                portforward,
                "create",
                "pods/portforward",
                cfg.namespace,
                private(core).connect_get_namespaced_pod_portforward,
                pod,
                cfg.namespace,
                ports=str(cfg.pprof_port),
            )
            try:
                res["attempts"] = attempt + 1
                get_trace(pf.socket(cfg.pprof_port), cfg, max(1.0, end - time.monotonic()), dest, res)
                break
            except (http.client.RemoteDisconnected, ConnectionError):
                # retry only while nothing arrived: bytes on disk are never rewritten or doubled
                if attempt == 7 or (dest.exists() and dest.stat().st_size):
                    raise
                pf.close()
                time.sleep(0.5)
        res["complete"] = True
        err = pf.error(cfg.pprof_port)
        if err:
            res["port_forward_error"] = err
    except Exception as e:  # noqa: BLE001 - a worker thread: every failure is recorded, none escapes
        res["complete"] = False
        res["error"] = f"port {cfg.pprof_port}: {type(e).__name__}: {e}"
    res["mono_done_ns"] = time.monotonic_ns()
    res["bytes"] = dest.stat().st_size if dest.exists() else 0
