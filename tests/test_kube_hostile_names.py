"""Names from the API server never steer where a bundle is written.

The API server here is a FAKE: a loopback HTTP server speaking just enough of the Kubernetes
API (list and read pods) for the real kubernetes client to list and read a pod whose
namespace, name and container name are hostile (``../``, ``/``, NUL, newline, very long). A
real API server refuses such names, so only a fake one can send them, and going through the
real client checks that nothing between the wire and the path (deserialisation, the
selector listing, describe) launders or trusts them. The sampler's exec is a websocket
protocol this fake does not speak: that one function is stubbed at its Python boundary.
"""

from __future__ import annotations

import importlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="the [kube] extra is not installed")

from gmpanalysis.errors import CollectError  # noqa: E402
from gmpanalysis.kube.config import CollectConfig  # noqa: E402
from gmpanalysis.kube.paths import bundle_dir, safe_component  # noqa: E402

kcollect = importlib.import_module("gmpanalysis.kube.collect")

HOSTILE = ["../../escape", "/etc/cron.d/x", "..", ".", "a/../../b", "x\0y", "line\nbreak", "é" * 300, ""]


def _pod(name: str, namespace: str, container: str, node: str = "node0") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": "0f2c9c1e-6a41-4a8e-9d0b-5d1c2e3f4a5b"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": container, "image": "x", "resources": {"limits": {"cpu": "500m"}}, "env": []}],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "containerStatuses": [
                {
                    "name": container,
                    "image": "x",
                    "imageID": "x",
                    "ready": True,
                    "restartCount": 0,
                    "containerID": "containerd://" + "ab" * 32,
                }
            ],
        },
    }


class _FakeApi(BaseHTTPRequestHandler):
    target: dict = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        if path == "/api/v1/namespaces/gmp-system/pods":
            body = {"kind": "PodList", "apiVersion": "v1", "items": [_pod("gmp-sampler-abcde", "gmp-system", "s")]}
        elif path == "/api/v1/namespaces/default/pods":
            body = {"kind": "PodList", "apiVersion": "v1", "items": [self.target]}
        elif path.startswith("/api/v1/namespaces/default/pods/"):
            body = self.target
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def fake_api(tmp_path):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _FakeApi)
    # shutdown() waits for the loop's next poll: 0.5 s by default, at every test's end
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    th.start()
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{srv.server_port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    yield kc
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("name", HOSTILE, ids=lambda n: repr(n)[:20])
def test_safe_component_is_one_harmless_component(name):
    c = safe_component(name)
    assert c and c not in (".", "..") and "/" not in c and "\0" not in c and "\n" not in c
    assert not c.startswith(".") and len(c.encode()) <= 63
    assert safe_component(name + "x") != c  # distinct names, distinct components


def test_valid_names_are_kept():
    for n in ("default", "gmp-demoapp-7d9f8c6b5-x2x4q", "app", "a.b-c"):
        assert safe_component(n) == n


def test_bundle_dir_stays_inside_out(tmp_path):
    for n in HOSTILE:
        d = bundle_dir(tmp_path, n, n, n, "20260101T000000Z")
        assert d.parent == tmp_path


@pytest.mark.parametrize("hostile", ["../../escape", "/abs", "a/../../../b", "x\nrm -rf"])
def test_collect_from_a_hostile_api_server_writes_inside_out(fake_api, tmp_path, monkeypatch, hostile):
    _FakeApi.target = _pod(hostile, "../" + hostile, "../c/" + hostile)
    out = tmp_path / "deep" / "out"

    def fake_exec(core, cfg, sampler, targets, left, csv, log, on_start, until=None):
        # the exec's websocket is not spoken by the fake server: a sampler that wrote nothing
        assert sampler == "gmp-sampler-abcde"
        return 0, "", None

    monkeypatch.setattr(kcollect, "stream_sampler", fake_exec)
    logs: list[str] = []
    cfg = CollectConfig(
        namespace="default", selector="app=x", out=out, kubeconfig=str(fake_api), pprof_port=None, duration_s=1
    )
    dirs = kcollect.collect(cfg, logs.append)
    assert len(dirs) == 1
    d = dirs[0]
    assert d.parent == out and d.is_dir()
    # nothing was written anywhere but inside out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "kubeconfig"]
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["out"]
    meta = json.loads((d / "meta.json").read_text())
    assert meta["pod"] == hostile  # recorded as sent
    assert any("not a valid Kubernetes name" in m for m in logs), logs


def test_bundle_dir_guard(tmp_path, monkeypatch):
    import gmpanalysis.kube.paths as paths

    monkeypatch.setattr(paths, "safe_component", lambda x: "../x")
    with pytest.raises(CollectError, match="would leave"):
        paths.bundle_dir(tmp_path, "a", "b", "c", "..")
    assert list(Path(tmp_path).iterdir()) == []


def test_a_pod_named_dotdot_is_refused_and_writes_nothing(fake_api, tmp_path, monkeypatch):
    # the client sends GET .../pods/.. which HTTP normalises away: the read finds no pod
    _FakeApi.target = _pod("..", "default", "app")
    monkeypatch.setattr(kcollect, "stream_sampler", lambda *a, **k: (0, "", None))
    out = tmp_path / "out"
    cfg = CollectConfig(
        namespace="default", selector="app=x", out=out, kubeconfig=str(fake_api), pprof_port=None, duration_s=1
    )
    with pytest.raises(CollectError, match=r"\.\."):
        kcollect.collect(cfg, lambda m: None)
    assert not out.exists()


def test_a_hostile_node_name_does_not_reach_the_field_selector(fake_api, tmp_path, monkeypatch):
    _FakeApi.target = _pod("demo", "default", "app", node="node0,metadata.name!=x")
    monkeypatch.setattr(kcollect, "stream_sampler", lambda *a, **k: (0, "", None))
    cfg = CollectConfig(
        namespace="default", pod="demo", out=tmp_path / "out", kubeconfig=str(fake_api), pprof_port=None, duration_s=1
    )
    with pytest.raises(CollectError, match="node name 'node0,metadata.name!=x'.*not a valid Kubernetes name"):
        kcollect.collect(cfg, lambda m: None)
    assert not (tmp_path / "out").exists()


def test_the_command_line_prints_a_hostile_name_escaped(fake_api, tmp_path, monkeypatch, capsys):
    from gmpanalysis import cli

    _FakeApi.target = _pod("../x\x1b[2J\nforged line", "default", "app")
    monkeypatch.setattr(kcollect, "stream_sampler", lambda *a, **k: (0, "", None))
    out = tmp_path / "out"
    out.mkdir()
    argv = ["collect", "--kubeconfig", str(fake_api), "-n", "default", "-l", "app=x", "--out", str(out)]
    assert cli.main([*argv, "--pprof-port", "0", "--duration", "1"]) == 0
    cap = capsys.readouterr()
    assert "\x1b" not in cap.err and "\nforged line" not in cap.err and "\\x1b" in cap.err
    (d,) = out.iterdir()
    assert cap.out.strip() == str(d)
