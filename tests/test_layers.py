"""The package's import graph has no cycles: module-level and in-function imports alike
(an in-function import only hides a cycle; it does not remove it). The topic modules hold
builders that take their inputs; analysis.py calls them and keeps what they build; the
public accessors (frames.py) sit above both."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "gmpanalysis"


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    mods = {_module(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = pkg.split(".")
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
                target = ""
            else:
                continue
            for name in [target, *names]:
                if name in graph and name != mod:
                    graph[mod].add(name)
    # a package's __init__ re-exports: importing gmpanalysis.x is not importing gmpanalysis
    return {m: {t for t in ts if t != "gmpanalysis" and not (PKG / Path(*t.split(".")[1:]) / "__init__.py").exists()}
            for m, ts in graph.items()}  # fmt: skip


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_sees_in_function_imports():
    g = _graph()
    # frames imports analysis at module level, report imports it too; replayinputs' levels import is in a function
    assert "gmpanalysis.analysis" in g["gmpanalysis.frames"]
    assert "gmpanalysis.levels" in g["gmpanalysis.replayinputs"]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_imports(mod: str, is_package: bool, source: str, modules: set[str]) -> set[tuple[str, str]]:
    """(importer, target.name) for every underscore name ``mod`` takes from another module of
    the package: ``from .x import _y`` (``import y as _alias`` of a public name is fine), and
    ``x._y`` where ``x`` names a package module. A package's own private submodules are its
    own (``from . import _pools`` in gmpanalysis/__init__.py)."""
    pkg = mod if is_package else mod.rsplit(".", 1)[0]
    found: set[tuple[str, str]] = set()
    aliases: dict[str, str] = {}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "gmpanalysis":
                continue
            for a in node.names:
                if f"{target}.{a.name}" in modules:
                    aliases[a.asname or a.name] = f"{target}.{a.name}"
                if _private(a.name) and target != mod:
                    found.add((mod, f"{target}.{a.name}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in modules:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
            target = aliases.get(node.value.id)
            if target is not None and target != mod:
                found.add((mod, f"{target}.{node.attr}"))
    return found


def test_no_module_imports_a_private_name_of_another():
    paths = {_module(p): p for p in PKG.rglob("*.py")}
    found: set[tuple[str, str]] = set()
    for mod, path in paths.items():
        found |= _private_imports(mod, path.name == "__init__.py", path.read_text(), set(paths))
    new = sorted(f"{m} takes {t}" for m, t in found)
    assert not new, "a name another module needs is its API: name it without the underscore\n" + "\n".join(new)


def test_the_check_finds_a_private_import():
    mods = {"gmpanalysis", "gmpanalysis._pools", "gmpanalysis.whatif", "gmpanalysis.cfsreplay",
            "gmpanalysis.gotrace", "gmpanalysis.gotrace.tables", "gmpanalysis.gotrace.spec",
            "gmpanalysis.gotrace.reader", "gmpanalysis.gotrace.wire"}  # fmt: skip
    src = "from .cfsreplay import _replay, replay\nfrom . import _pools\n"
    assert _private_imports("gmpanalysis.whatif", False, src, mods) == {
        ("gmpanalysis.whatif", "gmpanalysis.cfsreplay._replay"),
        ("gmpanalysis.whatif", "gmpanalysis._pools"),
    }
    assert _private_imports("gmpanalysis", True, "from . import _pools, fleet\n", mods) == set()
    src = "from . import spec as _s, tables as _tables\nfrom .wire import uvarint as _uvarint\nx = _tables._frame\n"
    assert _private_imports("gmpanalysis.gotrace.reader", False, src, mods) == {
        ("gmpanalysis.gotrace.reader", "gmpanalysis.gotrace.tables._frame")
    }
    src = "import gmpanalysis.gotrace.tables as T\nT._frame()\nfrom gmpanalysis.gotrace.tables import _x\n"
    assert _private_imports("gmpanalysis.whatif", False, src, mods) == {
        ("gmpanalysis.whatif", "gmpanalysis.gotrace.tables._frame"),
        ("gmpanalysis.whatif", "gmpanalysis.gotrace.tables._x"),
    }
