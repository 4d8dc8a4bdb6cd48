"""The command line under bad arguments, as a hostile or careless user gives them.

One row per case: the argv, the exit code, a fragment the one-line message must hold. Every
case ends with ``gmpanalysis: error: ...`` (or argparse's own usage error) on stderr and
no traceback. Run in-process: the lab and the Kubernetes collection are replaced by
functions that fail the test if a case ever gets that far (a case must be refused before
anything starts), and the kubeconfigs are made-up files in a temporary home (no real
cluster is ever asked; the one server named is 127.0.0.1:1, where nothing listens).

Left out: cases that need another user than root (unreadable files, read-only
directories): the tests run as root here.
"""

from __future__ import annotations

import importlib
import os
import socket
from pathlib import Path

import pytest
from conftest import RUNS

import gmpanalysis.lab as lab
from gmpanalysis.cli import main
from gmpanalysis.errors import GmpError

# the module (the package's ``collect`` attribute is the function of that name)
kube_collect = importlib.import_module("gmpanalysis.kube.collect")
BUNDLE = next(p for p in RUNS if p.name == "cpu-0.5cpu-gmp1")

GOOD_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""

# (id, argv, exit code, fragment of stderr). {tmp} is a temporary directory holding:
# file (a regular file), dir (empty), full (a non-empty directory), kc-* (kubeconfigs).
A = "gmpanalysis: error: "
CASES: list[tuple[str, list[str], int, str]] = [
    # --- no or unknown command: argparse's usage error
    ("no-command", [], 2, "the following arguments are required: cmd"),
    ("unknown-command", ["frobnicate"], 2, "invalid choice"),
    ("unknown-flag", ["summary", "--bogus"], 2, "unrecognized arguments: --bogus"),
    ("lab-no-subcommand", ["lab"], 2, "required: labcmd"),
    # --- inputs
    ("summary-missing-dir", ["summary", "{tmp}/nope"], 2, "no such directory"),
    ("summary-empty-path", ["summary", ""], 2, A),
    ("summary-a-file", ["summary", "{tmp}/file"], 2, A),
    ("summary-empty-dir", ["summary", "{tmp}/dir"], 2, "meta.json: missing"),
    ("report-missing-dir", ["report", "{tmp}/nope", "-o", "{tmp}/r.html"], 2, "no such directory"),
    ("export-missing-dir", ["export", "{tmp}/nope", "-o", "{tmp}/t.json"], 2, "no such directory"),
    ("export-no-bundle", ["export"], 2, "the following arguments are required: bundle"),
    ("trace-missing", ["trace", "{tmp}/nope.out"], 2, "no such file"),
    ("trace-a-directory", ["trace", "{tmp}/dir"], 2, "is a directory"),
    ("trace-empty-path", ["trace", ""], 2, A),
    ("trace-empty-file", ["trace", "{tmp}/empty"], 2, A),
    ("trace-text-file", ["trace", "{tmp}/file"], 2, A),
    ("trace-dev-null", ["trace", "/dev/null"], 2, "not a regular file"),
    ("trace-dev-zero", ["trace", "/dev/zero"], 2, "not a regular file"),
    ("trace-fifo", ["trace", "{tmp}/fifo"], 2, "not a regular file"),
    ("trace-socket", ["trace", "{tmp}/sock"], 2, "not a regular file"),
    # --- outputs
    ("report-out-missing-dir", ["report", str(BUNDLE), "-o", "{tmp}/nope/r.html"], 2, "no such directory"),
    ("report-out-a-directory", ["report", str(BUNDLE), "-o", "{tmp}/dir"], 2, "is a directory"),
    ("report-out-parent-a-file", ["report", str(BUNDLE), "-o", "{tmp}/file/r.html"], 2, "not a directory"),
    ("report-out-proc", ["report", str(BUNDLE), "-o", "/proc/r.html"], 2, "/proc/r.html"),
    ("report-out-dev-full", ["report", str(BUNDLE), "-o", "/dev/full"], 2, "/dev/full"),
    ("report-out-empty", ["report", str(BUNDLE), "-o", ""], 2, "-o"),
    ("export-out-missing-dir", ["export", str(BUNDLE), "-o", "{tmp}/nope/t.json"], 2, "no such directory"),
    ("export-out-a-directory", ["export", str(BUNDLE), "-o", "{tmp}/dir"], 2, "is a directory"),
    ("export-out-proc", ["export", str(BUNDLE), "-o", "/proc/t.json"], 2, "/proc/t.json"),
    ("export-out-dev-full", ["export", str(BUNDLE), "-o", "/dev/full"], 2, "/dev/full"),
    ("export-out-empty", ["export", str(BUNDLE), "-o", ""], 2, "-o"),
    # --- lab run: refused before anything starts
    ("lab-gomaxprocs-word", ["lab", "run", "--gomaxprocs", "abc"], 2, "--gomaxprocs"),
    ("lab-gomaxprocs-fraction", ["lab", "run", "--gomaxprocs", "1.5"], 2, "--gomaxprocs"),
    ("lab-gomaxprocs-empty", ["lab", "run", "--gomaxprocs", ""], 2, "--gomaxprocs"),
    ("lab-gomaxprocs-0", ["lab", "run", "--gomaxprocs", "0"], 2, "--gomaxprocs"),
    ("lab-gomaxprocs-negative", ["lab", "run", "--gomaxprocs=-1"], 2, "--gomaxprocs"),
    ("lab-rate-nan", ["lab", "run", "--rate", "nan"], 2, "--rate"),
    ("lab-rate-inf", ["lab", "run", "--rate", "inf"], 2, "--rate"),
    ("lab-rate-negative", ["lab", "run", "--rate=-5"], 2, "--rate"),
    ("lab-rate-0", ["lab", "run", "--rate", "0"], 2, "--rate"),
    ("lab-rate-word", ["lab", "run", "--rate", "fast"], 2, "--rate"),
    ("lab-work-ms-0", ["lab", "run", "--work-ms", "0"], 2, "--work-ms"),
    ("lab-work-ms-nan", ["lab", "run", "--work-ms", "nan"], 2, "--work-ms"),
    ("lab-work-ms-negative", ["lab", "run", "--work-ms=-1"], 2, "--work-ms"),
    ("lab-duration-nan", ["lab", "run", "--duration", "nan"], 2, "--duration"),
    ("lab-duration-inf", ["lab", "run", "--duration", "inf"], 2, "--duration"),
    ("lab-duration-0", ["lab", "run", "--duration", "0"], 2, "--duration"),
    ("lab-duration-huge", ["lab", "run", "--duration", "1e9"], 2, "--duration"),
    ("lab-period-1", ["lab", "run", "--period-us", "1"], 2, "--period-us"),
    ("lab-period-too-long", ["lab", "run", "--period-us", "1000001"], 2, "--period-us"),
    ("lab-period-word", ["lab", "run", "--period-us", "abc"], 2, "--period-us"),
    ("lab-period-arabic-digits", ["lab", "run", "--period-us", "١٠٠٠٠٠"], 2, "--period-us"),
    ("lab-burst-negative", ["lab", "run", "--burst-us=-5"], 2, "--burst-us"),
    ("lab-interval-0", ["lab", "run", "--interval-us", "0"], 2, "--interval-us"),
    ("lab-concurrency-0", ["lab", "run", "--concurrency", "0"], 2, "--concurrency"),
    ("lab-max-requests-0", ["lab", "run", "--max-requests", "0"], 2, "--max-requests"),
    ("lab-alloc-kb-negative", ["lab", "run", "--alloc-kb=-1"], 2, "--alloc-kb"),
    ("lab-live-mb-negative", ["lab", "run", "--live-mb=-1"], 2, "--live-mb"),
    ("lab-seed-word", ["lab", "run", "--seed", "x"], 2, "--seed"),
    ("lab-trace-start-nan", ["lab", "run", "--trace-start", "nan"], 2, "--trace-start"),
    ("lab-trace-seconds-negative", ["lab", "run", "--trace-seconds=-1"], 2, "--trace-seconds"),
    ("lab-resize-at-nan", ["lab", "run", "--resize-at", "nan", "--cpu-limit-after", "1"], 2, "--resize-at"),
    ("lab-resize-at-negative", ["lab", "run", "--resize-at=-1", "--cpu-limit-after", "1"], 2, "--resize-at"),
    ("lab-resize-at-alone", ["lab", "run", "--resize-at", "2"], 2, "go together"),
    ("lab-limit-after-word", ["lab", "run", "--resize-at", "2", "--cpu-limit-after", "lots"], 2, "cpu limit 'lots'"),
    ("lab-cpu-limit-word", ["lab", "run", "--cpu-limit", "half"], 2, "cpu limit 'half'"),
    ("lab-cpu-limit-0", ["lab", "run", "--cpu-limit", "0"], 2, "cpu limit '0'"),
    ("lab-cpu-limit-nan", ["lab", "run", "--cpu-limit", "nan"], 2, "cpu limit 'nan'"),
    ("lab-cpu-limit-inf", ["lab", "run", "--cpu-limit", "inf"], 2, "cpu limit 'inf'"),
    ("lab-cpu-limit-empty", ["lab", "run", "--cpu-limit", ""], 2, "cpu limit ''"),
    ("lab-parent-limit-none", ["lab", "run", "--parent-cpu-limit", "none"], 2, "--parent-cpu-limit none"),
    ("lab-workload-unknown", ["lab", "run", "--workload", "io"], 2, "invalid choice"),
    ("lab-cgroup-root-missing", ["lab", "run", "--cgroup-root", "{tmp}/nope"], 2, "--cgroup-root"),
    ("lab-cgroup-parent-climbs", ["lab", "run", "--cgroup-parent", "../.."], 2, "--cgroup-parent"),
    ("lab-cgroup-parent-absolute", ["lab", "run", "--cgroup-parent", "/etc"], 2, "--cgroup-parent"),
    ("lab-out-a-file", ["lab", "run", "-o", "{tmp}/file"], 2, "not a directory"),
    ("lab-out-non-empty", ["lab", "run", "-o", "{tmp}/full"], 2, "not empty"),
    ("lab-out-parent-a-file", ["lab", "run", "-o", "{tmp}/file/run"], 2, "not a directory"),
    ("lab-name-empty", ["lab", "run", "--name", ""], 2, "--name"),
    ("sweep-values-word", ["lab", "sweep", "--gomaxprocs-values", "1,x"], 2, "--gomaxprocs-values"),
    ("sweep-values-empty", ["lab", "sweep", "--gomaxprocs-values", ""], 2, "--gomaxprocs-values"),
    ("sweep-values-hole", ["lab", "sweep", "--gomaxprocs-values", "1,,2"], 2, "--gomaxprocs-values"),
    ("sweep-values-0", ["lab", "sweep", "--gomaxprocs-values", "0,2"], 2, "--gomaxprocs-values"),
    ("sweep-values-fraction", ["lab", "sweep", "--gomaxprocs-values", "1.5"], 2, "--gomaxprocs-values"),
    ("sweep-out-a-file", ["lab", "sweep", "-o", "{tmp}/file"], 2, "not a directory"),
    ("sweep-rate-inf", ["lab", "sweep", "--rate", "inf"], 2, "--rate"),
    # --- collect: configuration refused before any cluster is asked
    ("collect-no-namespace", ["collect", "--pod", "p"], 2, "-n/--namespace"),
    ("collect-no-target", ["collect", "-n", "ns"], 2, "one of the arguments --pod -l/--selector is required"),
    ("collect-bad-namespace", ["collect", "-n", "Bad_NS", "--pod", "p"], 2, "not a valid Kubernetes name"),
    ("collect-bad-pod", ["collect", "-n", "ns", "--pod", "../x"], 2, "not a valid Kubernetes name"),
    ("collect-duration-nan", ["collect", "-n", "ns", "--pod", "p", "--duration", "nan"], 2, "--duration"),
    ("collect-duration-inf", ["collect", "-n", "ns", "--pod", "p", "--duration", "inf"], 2, "--duration"),
    ("collect-duration-negative", ["collect", "-n", "ns", "--pod", "p", "--duration=-1s"], 2, "--duration"),
    ("collect-duration-word", ["collect", "-n", "ns", "--pod", "p", "--duration", "soon"], 2, "--duration"),
    ("collect-port-too-big", ["collect", "-n", "ns", "--pod", "p", "--pprof-port", "70000"], 2, "--pprof-port"),
    ("collect-port-word", ["collect", "-n", "ns", "--pod", "p", "--pprof-port", "http"], 2, "--pprof-port"),
    ("collect-out-a-file", ["collect", "-n", "ns", "--pod", "p", "--out", "{tmp}/file"], 2, "not a directory"),
    ("collect-kubeconfig-missing", ["collect", "-n", "ns", "--pod", "p", "--kubeconfig", "{tmp}/nope"], 2, "nope"),
    ("collect-kubeconfig-dir", ["collect", "-n", "ns", "--pod", "p", "--kubeconfig", "{tmp}/dir"], 2, "kubeconfig"),
    (
        "collect-kubeconfig-garbage",
        ["collect", "-n", "ns", "--pod", "p", "--kubeconfig", "{tmp}/kc-garbage"],
        2,
        "kc-garbage",
    ),
    ("collect-kubeconfig-empty", ["collect", "-n", "ns", "--pod", "p", "--kubeconfig", "{tmp}/empty"], 2, "empty"),
    ("collect-kubeconfig-list", ["collect", "-n", "ns", "--pod", "p", "--kubeconfig", "{tmp}/kc-list"], 2, "kc-list"),
    (
        "collect-kubeconfig-binary",
        ["collect", "-n", "ns", "--pod", "p", "--kubeconfig", "{tmp}/kc-binary"],
        2,
        "kc-binary",
    ),
    (
        "collect-kubeconfig-no-context",
        ["collect", "-n", "ns", "--pod", "p", "--kubeconfig", "{tmp}/kc-nocontext"],
        2,
        "kc-nocontext",
    ),
    (
        "collect-context-unknown",
        ["collect", "-n", "ns", "--pod", "p", "--kubeconfig", "{tmp}/kc-good", "--context", "nope"],
        2,
        "nope",
    ),
    (
        "collect-server-unreachable",
        ["collect", "-n", "ns", "--pod", "p", "--kubeconfig", "{tmp}/kc-good"],
        2,
        "127.0.0.1:1",
    ),
    ("collect-no-kubeconfig", ["collect", "-n", "ns", "--pod", "p"], 2, "--kubeconfig"),
    ("collect-env-kubeconfig-garbage", ["collect", "-n", "ns", "--pod", "p"], 2, "kc-garbage"),
]


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "file").write_text("not a bundle, not a trace\n")
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "dir").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "kc-garbage").write_text("{{{ : :\n\t- [\n")
    (tmp_path / "kc-list").write_text("[1, 2, 3]\n")
    (tmp_path / "kc-binary").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "kc-nocontext").write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    (tmp_path / "kc-good").write_text(GOOD_KUBECONFIG)
    # no real cluster: an empty home, no KUBECONFIG, not in a pod
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    def started(*a: object, **kw: object) -> None:
        raise AssertionError("the lab was started: the case was not refused in validation")

    monkeypatch.setattr(lab, "run_lab", started)
    monkeypatch.setattr(lab, "sweep", started)
    monkeypatch.setattr(kube_collect, "stream_sampler", started)
    return tmp_path


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """main() in-process: (exit code, stderr). An exception out of main() is a traceback."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else 2
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("argv", "code", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument(places, capsys, monkeypatch, argv, code, fragment, request):
    if request.node.callspec.id == "collect-env-kubeconfig-garbage":
        monkeypatch.setenv("KUBECONFIG", str(places / "kc-garbage"))
    sock = None
    if "trace-socket" in request.node.callspec.id:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(places / "sock"))
    try:
        got, err = run_cli([a.replace("{tmp}", str(places)) for a in argv], capsys)
    finally:
        if sock is not None:
            sock.close()
    assert "Traceback" not in err
    assert got == code, err
    assert fragment.replace("{tmp}", str(places)) in err, err
    lines = [x for x in err.splitlines() if x.startswith("gmpanalysis: error: ")]
    if code == 2 and not err.startswith("usage:"):
        assert len(lines) == 1, err  # one line, whatever the message held


def test_every_gmp_error_is_one_line_and_a_bug_keeps_its_traceback(monkeypatch, capsys, tmp_path):
    """Whatever load_run raises: a GmpError (even one whose text has newlines or terminal
    escapes) is one line and exit 2; anything else is a bug and propagates with its
    traceback rather than being dressed up as an error message."""
    import gmpanalysis.bundle as bundle

    def bad(path: object) -> None:
        raise GmpError("first line\nsecond line \x1b[31mred\x1b[0m")

    monkeypatch.setattr(bundle, "load_run", bad)
    for cmd in (["summary", str(tmp_path)], ["report", str(tmp_path), "-o", str(tmp_path / "r.html")]):
        code, err = run_cli(cmd, capsys)
        assert code == 2
        assert err == "gmpanalysis: error: first line; second line \\x1b[31mred\\x1b[0m\n"

    def bug(path: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(bundle, "load_run", bug)
    with pytest.raises(KeyError):
        main(["summary", str(tmp_path)])
