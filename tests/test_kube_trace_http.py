"""The trace request the collector sends through a port-forward, against real local HTTP
servers (127.0.0.1): the Host it sends, a refusal quoted with the server's words, chunked
bodies streamed to disk, a body cut off mid-chunk kept and flagged."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

import gmpanalysis as gmp
from gmpanalysis.kube.config import CollectConfig, validate
from gmpanalysis.kube.trace import get_trace

BODY = bytes(range(256)) * 300  # 76.8 KB, several chunks


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    allowed_host: str | None = None  # None: the host:port the client dialled
    cut_after: int | None = None  # close the connection inside a chunk after this many bytes
    seen: list = []

    def do_GET(self):  # noqa: N802 - the http.server API
        Handler.seen.append((self.path, self.headers.get("Host")))
        want = Handler.allowed_host or f"127.0.0.1:{self.server.server_address[1]}"
        if self.headers.get("Host") != want:
            msg = b"host not allowed"
            self.send_response(403)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        if not self.path.startswith("/admin/pprof/trace?seconds="):
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        for i in range(0, len(BODY), 10_000):
            chunk = BODY[i : i + 10_000]
            if Handler.cut_after is not None and sent + len(chunk) > Handler.cut_after:
                self.wfile.write(b"%x\r\n" % len(chunk) + chunk[:100])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *a):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # shutdown() waits for the loop's next poll: 0.5 s by default, at every test's end
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    Handler.allowed_host, Handler.cut_after, Handler.seen = None, None, []
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def fetch(port, tmp_path, **kw):
    cfg = CollectConfig(namespace="x", pod="p", pprof_port=port, pprof_path="/admin/pprof/trace", **kw)
    validate(cfg)
    dest, res = tmp_path / "trace.out", {}
    get_trace(socket.create_connection(("127.0.0.1", port)), cfg, 2.0, dest, res)
    return dest, res


def test_the_dialled_host_and_the_given_path_are_sent_and_the_body_streamed(server, tmp_path):
    dest, res = fetch(server, tmp_path)
    assert Handler.seen == [("/admin/pprof/trace?seconds=2", f"127.0.0.1:{server}")]
    assert res["http_status_line"] == "HTTP/1.1 200 OK" and dest.read_bytes() == BODY


def test_a_refusal_is_quoted_with_the_servers_words_and_a_hint(server, tmp_path):
    Handler.allowed_host = "admin.internal:9000"
    with pytest.raises(gmp.CollectError, match=r"answered 403 Forbidden: 'host not allowed'; .*--pprof-host"):
        fetch(server, tmp_path)
    dest, _ = fetch(server, tmp_path, pprof_host="admin.internal:9000")
    assert dest.read_bytes() == BODY


def test_a_wrong_path_names_the_path(server, tmp_path):
    cfg = CollectConfig(namespace="x", pprof_port=server)  # the default /debug/pprof/trace
    with pytest.raises(gmp.CollectError, match=r"GET /debug/pprof/trace\?seconds=2 .*answered 404.*--pprof-path"):
        get_trace(socket.create_connection(("127.0.0.1", server)), cfg, 2.0, tmp_path / "t", {})


def test_a_body_cut_inside_a_chunk_is_kept_and_flagged(server, tmp_path):
    Handler.cut_after = 30_000
    with pytest.raises(gmp.CollectError, match="connection closed inside the body after 30100 bytes"):
        fetch(server, tmp_path)
    assert (tmp_path / "trace.out").read_bytes() == BODY[:30_100]


@pytest.mark.parametrize("bad", [{"pprof_path": "debug/pprof/trace"}, {"pprof_path": "/a b"}, {"pprof_host": "a b"}])
def test_bad_endpoint_arguments_are_refused(bad):
    with pytest.raises(gmp.CollectError, match="--pprof-"):
        validate(CollectConfig(namespace="x", pod="p", **bad))
