"""The kubernetes client's port-forward proxy thread dies with an exception when a
forward is closed under it. Only that ending of this package's own forwards is kept out of
the output; anything else a thread raises is printed as before. (In a fresh interpreter:
pytest puts its own hook on threads.)"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import ssl, sys, threading
from gmpanalysis.kube import trace as T

def raise_in_thread(name, exc, ours):
    def run():
        if ours:
            T._OURS.add(threading.current_thread())
        raise exc
    t = threading.Thread(target=run, name=name)
    t.start()
    t.join()
    print("--", name, type(exc).__name__, file=sys.stderr, flush=True)

T.quiet_proxy_threads()
T.quiet_proxy_threads()  # installed once
proxy = T.PROXY_THREAD + ": 6060"
raise_in_thread(proxy, ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), True)
raise_in_thread(proxy, RuntimeError("Unexpected frame data size"), True)
raise_in_thread(proxy, ConnectionResetError("reset"), False)
raise_in_thread("worker", OSError("boom"), True)
"""


def test_only_our_forwards_closing_is_kept_quiet():
    err = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60).stderr
    parts = err.split("-- ")
    # our forward, closed under its proxy: quiet
    assert "Traceback" not in parts[0] and "SSLEOFError" in parts[1].splitlines()[0]
    # a frame the client does not understand (not a closed stream): shown
    assert "RuntimeError: Unexpected frame data size" in parts[1]
    # a forward this package did not open, and another thread's error: shown
    assert "ConnectionResetError: reset" in parts[2]
    assert "OSError: boom" in parts[3]
