"""One error family, one warning family, and data notes that reach the report."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import shutil
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from conftest import RUNS  # noqa: E402

import gmpanalysis as gmp  # noqa: E402
from gmpanalysis.cli import main  # noqa: E402
from gmpanalysis.errors import GmpError, GmpWarning  # noqa: E402

PKG = Path(gmp.__file__).parent
MODULES = sorted(PKG.rglob("*.py"))

# raised on purpose and not errors of gmpanalysis: each one says why
NOT_GMP_ERRORS = {
    "KeyboardInterrupt",  # lab/run.py re-raises Ctrl-C after stopping its processes
    "argparse.ArgumentTypeError",  # argparse's protocol for type= functions: becomes a usage message
    "_Short",  # gotrace/wire.py: private "ran out of bytes" signal, always caught inside gotrace
    "bug",  # kube/collect.py: a non-GmpError from a pod's thread re-raised, traceback and all
}


def _module(path: Path):
    rel = path.relative_to(PKG.parent).with_suffix("")
    name = ".".join(p for p in rel.parts if p != "__init__")
    return importlib.import_module(name)


def _resolve(mod, node: ast.expr):
    return eval(compile(ast.Expression(node), mod.__file__, "eval"), vars(mod))  # noqa: S307 - our own source


def _raised(tree: ast.AST):
    for n in ast.walk(tree):
        if isinstance(n, ast.Raise) and n.exc is not None:
            yield n, n.exc.func if isinstance(n.exc, ast.Call) else n.exc


def test_every_raised_exception_is_a_gmp_error():
    bad, seen = [], 0
    for path in MODULES:
        mod = _module(path)
        for node, what in _raised(ast.parse(path.read_text())):
            name = ast.unparse(what)
            if name in NOT_GMP_ERRORS:
                continue
            seen += 1
            obj = _resolve(mod, what)
            if inspect.isfunction(obj):  # raise _forbidden(...): a factory, judged by its return type
                ret = inspect.signature(obj).return_annotation
                obj = eval(ret, vars(mod)) if isinstance(ret, str) else ret  # noqa: S307
            if not (isinstance(obj, type) and issubclass(obj, GmpError)):
                bad.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: raise {name}")
    assert seen > 100
    assert not bad, "raise a GmpError subclass (gmpanalysis/errors.py) instead:\n" + "\n".join(bad)


def test_every_exception_and_warning_class_is_in_the_family():
    bad = []
    for path in MODULES:
        mod = _module(path)
        for name, obj in vars(mod).items():
            if not isinstance(obj, type) or obj.__module__ != mod.__name__ or name.startswith("_"):
                continue
            if issubclass(obj, Warning) and not issubclass(obj, GmpWarning):
                bad.append(f"{mod.__name__}.{name} is a warning but not a GmpWarning")
            elif issubclass(obj, BaseException) and not issubclass(obj, (GmpError, Warning)):
                bad.append(f"{mod.__name__}.{name} is an exception but not a GmpError")
    assert not bad, "\n".join(bad)


def test_every_warning_issued_is_a_gmp_warning():
    bad, seen = [], 0
    for path in MODULES:
        mod = _module(path)
        for n in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(n, ast.Call) and ast.unparse(n.func) in ("warnings.warn", "warn")):
                continue
            seen += 1
            cat = n.args[1] if len(n.args) > 1 else next((k.value for k in n.keywords if k.arg == "category"), None)
            obj = _resolve(mod, cat) if cat is not None else UserWarning
            if not (isinstance(obj, type) and issubclass(obj, GmpWarning)):
                bad.append(f"{path.relative_to(PKG.parent)}:{n.lineno}: warning category {obj!r}")
    assert seen >= 4
    assert not bad, "\n".join(bad)


def test_the_family_is_exported_and_old_homes_still_work():
    from gmpanalysis import bundle, errors, gotrace, kube

    for name in errors.__all__:
        assert getattr(gmp, name) is getattr(errors, name), name
        assert name in gmp.__all__, name
        cls = getattr(errors, name)
        assert issubclass(cls, GmpWarning if name.endswith("Warning") else GmpError) or cls is GmpError
    assert issubclass(GmpWarning, UserWarning)
    assert bundle.TruncatedLineWarning is gmp.TruncatedLineWarning
    assert gotrace.TruncatedTraceWarning is gmp.TruncatedTraceWarning
    assert gotrace.ClockWarning is gmp.ClockWarning
    assert gotrace.UnknownVersionWarning is gmp.UnknownVersionWarning
    assert kube.CollectError is gmp.CollectError
    assert issubclass(gmp.UsageError, ValueError)  # old `except ValueError` still catches it


def test_bad_arguments_are_usage_errors():
    from gmpanalysis.lab import LabCgroup

    with pytest.raises(gmp.UsageError, match="lab cgroup names start with"):
        LabCgroup("bad")


# --- data notes in the report ----------------------------------------------------------


def _damaged_bundle(tmp_path: Path) -> Path:
    """The smallest traced fixture with its trace.out cut in half."""
    src = next(p for p in RUNS if p.name == "cpu-0.5cpu-gmp1")
    d = tmp_path / "cut"
    shutil.copytree(src, d)
    data = (d / "trace.out").read_bytes()
    (d / "trace.out").write_bytes(data[: len(data) // 2])
    return d


def _notes_section(html: str) -> str:
    start = html.index('<section id="data-notes"')
    assert start < html.index("<h2>Findings</h2>"), "Data notes must come first"
    return html[start : html.index("</section>", start)]


def test_truncated_trace_is_a_data_note_in_the_report(tmp_path):
    run = gmp.load_run(_damaged_bundle(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error", GmpWarning)  # recorded by to_report, not raised
        out = gmp.to_report([run], tmp_path / "r.html")
    notes = _notes_section(out.read_text())
    assert "Data notes" in notes and "<h3>cpu-0.5cpu-gmp1</h3>" in notes
    assert "trace ends inside a generation at offset" in notes
    assert any("trace ends inside a generation" in n for n in run.notes)  # and on the run itself
    assert "1 data note(s) for this run" in out.read_text()


def test_cli_report_shows_every_note(tmp_path, capsys):
    """Through the command (which silences library warnings): a cut trace, a dropped
    partial CSV line and an unfinished collection all reach the HTML."""
    d = _damaged_bundle(tmp_path)
    csv = (d / "cpu_stat.csv").read_bytes()
    (d / "cpu_stat.csv").write_bytes(csv[:-10])  # the sampler stopped mid-line
    meta = json.loads((d / "meta.json").read_text())
    meta["complete"] = False
    (d / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "r.html"
    assert main(["report", str(d), "-o", str(out)]) == 0
    notes = _notes_section(out.read_text())
    assert "trace ends inside a generation" in notes
    assert "cpu_stat.csv: last line was incomplete" in notes
    assert "collection did not finish" in notes
    err = capsys.readouterr().err
    assert "note: collection did not finish" in err and "last line was incomplete" in err


def test_two_lab_runs_cannot_share_an_output_directory(tmp_path):
    """The output directory is claimed atomically: the second claim is refused, and so is a
    directory that holds anything else."""
    from gmpanalysis.lab.run import lock_output

    out = tmp_path / "bundle"
    out.mkdir()
    lock = lock_output(out)
    with pytest.raises(gmp.LabError, match="another lab run writes there"):
        lock_output(out)
    lock.unlink()
    (out / "meta.json").write_text("{}")
    with pytest.raises(gmp.LabError, match="not empty"):
        lock_output(out)
    assert not lock.exists()
