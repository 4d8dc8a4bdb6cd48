"""The Go execution trace of the target, fetched through a port-forward."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..errors import CollectError
from .api import _call
from .config import CollectConfig


def _fetch_trace(core: Any, cfg: CollectConfig, pod: str, seconds: float, dest: Path, res: dict[str, Any]) -> None:
    """Port-forward to the pprof port and stream the trace body to dest as it arrives
    (the standard library speaks HTTP over the forwarded socket, chunked or not)."""
    import http.client

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
                core.connect_get_namespaced_pod_portforward,
                pod,
                cfg.namespace,
                ports=str(cfg.pprof_port),
            )
            window = max(1.0, end - time.monotonic())
            conn = http.client.HTTPConnection("localhost", cfg.pprof_port, timeout=window + 30)
            conn.sock = pf.socket(cfg.pprof_port)  # the forwarded stream instead of a TCP connect
            conn.sock.settimeout(window + 30)
            try:
                conn.request(
                    "GET",
                    f"/debug/pprof/trace?seconds={window:.0f}",
                    headers={"Connection": "close", "Accept-Encoding": "identity"},
                )
                resp = conn.getresponse()
                break
            except (http.client.RemoteDisconnected, ConnectionError):
                if attempt == 7:
                    raise
                pf.close()
                time.sleep(0.5)
        res["http_status_line"] = f"HTTP/{resp.version / 10:.1f} {resp.status} {resp.reason}"
        res["attempts"] = attempt + 1
        if resp.status != 200:
            raise CollectError(
                f"pprof answered {resp.status} {resp.reason} on port {cfg.pprof_port} (is it a Go service with "
                "net/http/pprof listening there?)"
            )
        with open(dest, "wb") as out:
            try:
                while data := resp.read1(1 << 16):
                    out.write(data)
                    out.flush()
            except http.client.IncompleteRead as e:  # the forward dropped inside the body
                out.write(e.partial)
                raise CollectError(f"connection closed inside the body after {dest.stat().st_size} bytes") from None
        res["complete"] = True
        err = pf.error(cfg.pprof_port)
        if err:
            res["port_forward_error"] = err
    except Exception as e:  # noqa: BLE001 - a worker thread: every failure is recorded, none escapes
        res["complete"] = False
        res["error"] = f"port {cfg.pprof_port}: {type(e).__name__}: {e}"
    res["mono_done_ns"] = time.monotonic_ns()
    res["bytes"] = dest.stat().st_size if dest.exists() else 0
