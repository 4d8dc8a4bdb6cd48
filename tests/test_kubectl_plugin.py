"""`kubectl gmp` (gmpanalysis/kube/plugin.py): each verb is a gmpanalysis command line, checked
with the CLI's own parser; the namespace and context pass through; report and advise run on
what collect wrote; the krew manifest (plugins/gmp.yaml) names what its archive holds, and the
real krew (built once from the Go module proxy, scripts/krew.sh) installs it offline from the
manifest and the locally built archive, runs it, lists it and uninstalls it."""

from __future__ import annotations

import hashlib
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import RUNS, go_tool

from gmpanalysis import cli
from gmpanalysis.kube import plugin

REPO = Path(__file__).resolve().parents[1]


def parsed(argv: list[str]):
    """The CLI's parse of a planned command line (argparse exits on anything it refuses)."""
    return cli.build_parser().parse_args(argv)


def test_collect_maps_to_gmpanalysis_collect():
    p = plugin.plan(["collect", "web-7d4b9c-x2k", "-n", "shop", "--context", "prod", "--kubeconfig", "/k/cfg",
                     "-c", "app", "--duration", "10s", "--pprof-port", "0", "--sampler-namespace", "gmp",
                     "--out", "bundles"])  # fmt: skip
    assert p.then is None
    a = parsed(p.collect)
    assert a.func is cli.cmd_collect
    assert (a.namespace, a.pod, a.selector) == ("shop", "web-7d4b9c-x2k", None)
    assert (a.context, a.kubeconfig) == ("prod", "/k/cfg")
    assert (a.container, a.duration, a.pprof_port, a.sampler_namespace, a.out) == ("app", 10.0, 0, "gmp", "bundles")
    # what is not given is the CLI's default, not the plugin's
    d = parsed(plugin.plan(["collect", "web", "--namespace", "shop"]).collect)
    assert (d.duration, d.pprof_port, d.sampler_namespace, d.out, d.context) == (30.0, 6060, "gmp-system", "runs", None)


def test_report_and_advise_run_on_the_collected_bundles():
    p = plugin.plan(["report", "web", "-n", "shop", "-o", "web.html"])
    assert parsed(p.collect).func is cli.cmd_collect
    a = parsed(p.then_with(["runs/b1", "runs/b2"]))
    assert a.func is cli.cmd_report and a.bundles == ["runs/b1", "runs/b2"] and a.out == "web.html"
    p = plugin.plan(["advise", "web", "-n", "shop", "--objective", "cost", "--top", "3", "--max-limit", "2"])
    a = parsed(p.then_with(["runs/b1"]))
    assert a.func is cli.cmd_advise and a.bundles == ["runs/b1"]
    assert (a.objective, a.top, a.max_limit) == ("cost", 3, 2.0)
    # a pod spec sets no cpu.max.burst: the plugin weighs none unless told
    assert a.bursts == [0.0]
    a = parsed(plugin.plan(["advise", "web", "-n", "shop", "--bursts", "0,1"]).then_with(["runs/b1"]))
    assert a.bursts == [0.0, 1.0]


def test_namespace_defaults_to_the_contexts(tmp_path):
    pytest.importorskip("kubernetes", reason="the [kube] extra reads the kubeconfig")
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "dev",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [
                    {"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}},
                    {"name": "prod", "context": {"cluster": "c", "user": "u"}},
                ],
            }
        )
    )
    ns = {c: parsed(plugin.plan(["collect", "web", "--kubeconfig", str(cfg), *c]).collect).namespace
          for c in ((), ("--context", "prod"), ("-n", "x"))}  # fmt: skip
    assert ns == {(): "team-a", ("--context", "prod"): "default", ("-n", "x"): "x"}


def test_report_verb_end_to_end(monkeypatch, tmp_path, capsys):
    """The plugin runs collect, then the report of the bundle collect printed."""
    seen = {}

    def fake_collect(a):
        seen["collect"] = (a.namespace, a.pod)
        print(RUNS[0])
        return 0

    monkeypatch.setattr(cli, "cmd_collect", fake_collect)
    out = tmp_path / "r.html"
    assert plugin.main(["report", "web", "-n", "shop", "-o", str(out)]) == 0
    assert seen["collect"] == ("shop", "web")
    assert str(RUNS[0]) in capsys.readouterr().out  # collect's output still reaches the user
    assert out.read_text().startswith("<!doctype html>") and RUNS[0].name in out.read_text()


def test_collect_failure_stops_the_verb(monkeypatch, capsys):
    called = []
    monkeypatch.setattr(cli, "cmd_collect", lambda a: called.append(a) or 2)
    monkeypatch.setattr(cli, "cmd_report", lambda a: pytest.fail("report ran after a failed collect"))
    assert plugin.main(["report", "web", "-n", "shop"]) == 2
    assert called  # the collection ran (and failed): not refused before it


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["advise", "web", "-n", "shop", "--objective", "latency"], "invalid choice: 'latency'"),
        (["advise", "web", "-n", "shop", "--top", "0"], "--top"),
        (["advise", "web", "-n", "shop", "--bursts", "0,2"], "--bursts"),
        (["report", "web", "-n", "shop", "-o", "/nonexistent/dir/r.html"], "no such directory /nonexistent/dir"),
        (["collect", "web", "-n", "shop", "--duration", "soon"], "--duration"),
    ],
)
def test_options_are_refused_before_the_collection(monkeypatch, capsys, argv, said):
    """A wrong option of the verb after the collection, or a report file that cannot be
    written, is refused before collecting (found after a 30 s collection, it cost it)."""
    monkeypatch.setattr(cli, "cmd_collect", lambda a: pytest.fail("collected before refusing the options"))
    assert plugin.main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "nothing was collected" in err, err


def _script() -> list[str]:
    exe = Path(sys.executable).parent / "kubectl-gmp"
    if exe.exists():
        return [str(exe)]
    # an environment installed before the script was declared: the same entry point, and
    # pyproject.toml declares it (scripts/setup.sh reinstalls when pyproject.toml changes)
    text = (REPO / "pyproject.toml").read_text()
    assert 'kubectl-gmp = "gmpanalysis.kube.plugin:main"' in text
    return [sys.executable, "-m", "gmpanalysis.kube.plugin"]


def test_kubectl_gmp_help():
    r = subprocess.run([*_script(), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: kubectl gmp") and all(v in r.stdout for v in ("collect", "report", "advise"))
    r = subprocess.run([*_script(), "collect", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--namespace" in r.stdout and "--context" in r.stdout
    r = subprocess.run([*_script(), "collect"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "POD" in r.stderr


def build_archive(outdir: Path) -> Path:
    """plugins/build-krew-archive.sh's archive, built into outdir."""
    r = subprocess.run(
        ["bash", str(REPO / "plugins" / "build-krew-archive.sh"), str(outdir)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return Path(r.stdout.strip())


def test_krew_manifest(tmp_path):
    m = yaml.safe_load((REPO / "plugins" / "gmp.yaml").read_text())
    assert m["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and m["kind"] == "Plugin"
    assert m["metadata"]["name"] == "gmp"
    spec = m["spec"]
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)[1]
    assert spec["version"] == f"v{version}"
    assert spec["shortDescription"] and len(spec["shortDescription"]) <= 50
    assert "pip install" in spec["caveats"]
    # the archive is plugins/build-krew-archive.sh's (reproducible): its sha256 is the manifest's
    for platform in spec["platforms"]:
        assert platform["bin"] == "kubectl-gmp"
        assert {"from": "kubectl-gmp", "to": "."} in platform["files"]
        assert platform["uri"].endswith(f"/v{version}/kubectl-gmp.tar.gz")
    out = build_archive(tmp_path)
    assert out.parent == tmp_path
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert {p["sha256"] for p in spec["platforms"]} == {digest}


@pytest.fixture(scope="module")
def krew() -> str:
    return go_tool("krew", "KREW")


def on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """argv's stdout when it is a terminal (krew list prints its table only to one)."""
    master, slave = pty.openpty()
    try:
        r = subprocess.run(argv, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, timeout=120)
    finally:
        os.close(slave)
    out = b""
    try:
        while chunk := os.read(master, 4096):
            out += chunk
    except OSError:  # EIO: the terminal's other side closed, all is read
        pass
    finally:
        os.close(master)
    assert r.returncode == 0, r.stderr.decode()
    return out.decode()


def test_krew_installs_the_plugin_offline(krew, tmp_path):
    """krew install --manifest=plugins/gmp.yaml --archive=...: krew checks the archive against the
    manifest's sha256 (its uri, a release not yet made, is never fetched), installs kubectl-gmp
    into a throwaway KREW_ROOT, which then runs; krew list shows it, krew uninstall removes it.
    Offline: a --manifest install skips the index; list and uninstall only check that the index
    directory holds a git clone (index/default/.git), so an empty one stands in for
    `krew update` (a git clone from GitHub); KREW_NO_UPGRADE_CHECK=1 skips the GitHub request
    a release-stamped krew makes on 40% of its runs; the proxies point at a closed port, so a
    request that slipped through would fail the install rather than reach the network."""
    manifest = REPO / "plugins" / "gmp.yaml"
    version = yaml.safe_load(manifest.read_text())["spec"]["version"]
    archive = build_archive(tmp_path / "dist")
    root = tmp_path / "krew"
    (root / "index" / "default" / ".git").mkdir(parents=True)
    # krew's bin on PATH: else krew prints its setup advice on every run
    env = {**os.environ, "KREW_ROOT": str(root), "KREW_NO_UPGRADE_CHECK": "1", "GMP_PYTHON": sys.executable,
           "PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        env[proxy] = env[proxy.lower()] = "" if proxy == "NO_PROXY" else "http://127.0.0.1:9"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([krew, *args], capture_output=True, text=True, timeout=120, env=env,
                              stdin=subprocess.DEVNULL)  # fmt: skip

    # an archive that is not the manifest's: krew refuses it and installs nothing (the wrong
    # sha256 has letters: YAML reads 64 digits as a number, which krew refuses before any check)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(re.sub(r"sha256: [0-9a-f]{64}", "sha256: " + "ab" * 32, manifest.read_text()))
    r = run("install", f"--manifest={wrong}", f"--archive={archive}")
    assert r.returncode != 0 and "checksum does not match" in r.stderr, r.stderr
    assert not (root / "bin" / "kubectl-gmp").exists() and not (root / "receipts" / "gmp.yaml").exists()

    r = run("install", f"--manifest={manifest}", f"--archive={archive}")
    assert r.returncode == 0, r.stderr
    assert "Installed plugin: gmp" in r.stderr
    link = root / "bin" / "kubectl-gmp"
    assert link.is_symlink()
    installed = link.resolve()
    assert installed == (root / "store" / "gmp" / version / "kubectl-gmp").resolve()
    assert installed.read_bytes() == (REPO / "plugins" / "kubectl-gmp").read_bytes() and os.access(installed, os.X_OK)
    receipt = yaml.safe_load((root / "receipts" / "gmp.yaml").read_text())
    assert receipt["spec"]["version"] == version and receipt["status"]["source"]["name"] == "detached"

    # the installed wrapper runs the package's plugin (GMP_PYTHON: this interpreter)
    r = subprocess.run([str(link), "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: kubectl gmp") and all(v in r.stdout for v in ("collect", "report", "advise"))
    r = subprocess.run([str(link), "collect", "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and "--namespace" in r.stdout and "--context" in r.stdout, r.stderr

    r = run("list")  # piped: the names only, a manifest's install under the index "detached"
    assert r.returncode == 0 and r.stdout.split() == ["detached/gmp"], r.stdout + r.stderr
    rows = [line.split() for line in on_a_terminal([krew, "list"], env).splitlines()]
    assert rows == [["PLUGIN", "VERSION"], ["detached/gmp", version]]

    r = run("uninstall", "gmp")
    assert r.returncode == 0 and "Uninstalled plugin: gmp" in r.stderr, r.stderr
    assert not link.exists() and not link.is_symlink()
    assert not (root / "store" / "gmp").exists() and not (root / "receipts" / "gmp.yaml").exists()
    r = run("list")
    assert r.returncode == 0 and r.stdout.split() == [], r.stdout + r.stderr
