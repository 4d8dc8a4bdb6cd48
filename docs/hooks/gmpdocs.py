"""mkdocs hook: the parts of the documentation that are generated from the repository at
build time, so that they cannot drift from what they describe.

A page asks for one with a marker on a line of its own (an HTML comment, so the Markdown
source still reads well where it is shown unrendered):

- ``<!-- gmp:schema meta -->``: the fields of meta.json, from the JSON Schema
  ``gmpanalysis/bundle-meta.schema.json`` (itself generated from ``gmpanalysis/schema.py``;
  a test keeps the two equal).
- ``<!-- gmp:schema csv -->``: the columns of the bundle's CSV files, from the column
  tables of ``gmpanalysis/bundlefiles.py`` and their comments.
- ``<!-- gmp:results FILE [FILE ...] -->``: a benchmark's result table, from
  ``docs/benchmarks/results/FILE`` (the benchmarks write these files with
  ``--markdown PATH``); several files with the same columns become one table.
- ``<!-- gmp:text FILE -->``: a benchmark's printed output, ``docs/benchmarks/results/FILE``,
  as a text block.
- ``<!-- gmp:whatif-errors -->``: the what-if model's held-out errors per regime, from
  ``gmpanalysis/whatif-validation.json`` (written by ``benchmarks/validate_whatif.py``;
  the error bars the advice prints).
- ``<!-- gmp:include PATH -->``: a markdown file of the repository (``PATH`` from its root),
  headings one level down.
- ``<!-- gmp:cli -->``: ``gmpanalysis --help`` and the help of every subcommand, from the
  argument parser itself.

An unknown marker, a missing file or a file in an unexpected shape fails the build.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "benchmarks" / "results"
SCHEMA_FILE = ROOT / "gmpanalysis" / "bundle-meta.schema.json"
BUNDLEFILES = ROOT / "gmpanalysis" / "bundlefiles.py"
VALIDATION_FILE = ROOT / "gmpanalysis" / "whatif-validation.json"
MARKER = re.compile(r"^<!-- gmp:(?P<what>[\w-]+)(?P<args>(?: [^ >]+)*) -->$", re.M)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace every marker of the page by what it names."""

    def render(m: re.Match[str]) -> str:
        what, args = m["what"], m["args"].split()
        where = f"{page.file.src_path}: <!-- gmp:{what} -->"
        try:
            if what == "schema" and args == ["meta"]:
                return meta_table(json.loads(SCHEMA_FILE.read_text()))
            if what == "schema" and args == ["csv"]:
                return csv_tables(BUNDLEFILES.read_text())
            if what == "results" and args:
                return results_table([RESULTS / a for a in args])
            if what == "text" and len(args) == 1:
                return "```text\n" + (RESULTS / args[0]).read_text().rstrip("\n") + "\n```"
            if what == "whatif-errors" and not args:
                return whatif_errors(json.loads(VALIDATION_FILE.read_text()))
            if what == "cli" and not args:
                return cli_help()
            if what == "include" and len(args) == 1:
                return include(ROOT / args[0])
        except (OSError, ValueError, KeyError) as e:
            raise PluginError(f"{where}: {e}") from e
        raise PluginError(f"{where}: unknown marker (see docs/hooks/gmpdocs.py)")

    return MARKER.sub(render, markdown)


def include(path: Path) -> str:
    """A markdown file of the repository (a folder's README), its headings one level down
    and its first heading left out: the page that includes it gives the title."""
    if ROOT not in path.resolve().parents:
        raise ValueError(f"{path} is not inside the repository")
    lines = path.read_text().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    out, fence = [], False
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        out.append("#" + line if not fence and line.startswith("#") else line)
    return "\n".join(out).strip("\n")


def on_post_page(output: str, page: Any, config: Any) -> str:
    """The docstrings cross-reference in Sphinx roles (:func:`x`, :class:`~a.b.C`); on the API
    page show the name alone."""
    if page.file.src_path == "api.md":
        output = re.sub(r":(?:class|func|mod|data|attr|meth|exc|obj):(?=<code>)", "", output)
        output = re.sub(r"<code>~(?:[\w.]+\.)?(\w+)</code>", r"<code>\1</code>", output)
    return output


def cell(text: object) -> str:
    """Text that stays inside one cell of a Markdown table."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _types(prop: dict[str, Any]) -> str:
    t = prop.get("type", "any")
    types = t if isinstance(t, list) else [t]
    out = " or ".join(x for x in types if x != "null")
    if prop.get("type") == "array" and isinstance(prop.get("items"), dict) and "type" in prop["items"]:
        out = f"array of {_types(prop['items'])}"
    return out + (", or null" if "null" in types else "")


def _constraints(prop: dict[str, Any]) -> str:
    parts = []
    if "enum" in prop:
        parts.append("one of " + ", ".join(f"`{json.dumps(v)}`" for v in prop["enum"]))
    if "minimum" in prop:
        parts.append(f"≥ {prop['minimum']:,}")
    if "maximum" in prop:
        parts.append(f"≤ {prop['maximum']:,}")
    return "; ".join(parts)


def _meta_rows(props: dict[str, Any], required: list[str], prefix: str) -> list[str]:
    rows = []
    for name, prop in props.items():
        rows.append(
            f"| `{prefix}{name}` | {cell(_types(prop))} | {'yes' if name in required else ''} "
            f"| {cell(_constraints(prop))} | {cell(prop.get('description', ''))} |"
        )
        items = prop.get("items") if isinstance(prop.get("items"), dict) else None
        if "properties" in prop:
            rows += _meta_rows(prop["properties"], prop.get("required", []), f"{prefix}{name}.")
        elif items and "properties" in items:
            rows += _meta_rows(items["properties"], items.get("required", []), f"{prefix}{name}[].")
    return rows


def meta_table(schema: dict[str, Any]) -> str:
    """Every field of the meta.json JSON Schema, nested fields as ``parent.child``."""
    if not schema.get("properties"):
        raise ValueError(f"{SCHEMA_FILE.name}: no properties")
    head = [
        f"*{cell(schema.get('title', ''))}* ({cell(schema.get('$schema', ''))}): {cell(schema.get('description', ''))}",
        "",
        "| field | type | required | values | meaning |",
        "|---|---|---|---|---|",
    ]
    extra = "kept (unknown keys survive an older reader)" if schema.get("additionalProperties", True) else "refused"
    tail = ["", f"Other keys: {extra}."]
    return "\n".join(head + _meta_rows(schema["properties"], schema.get("required", []), "") + tail)


# a column line of bundlefiles.py's tables: `"name": dtype,  # comment`
COLUMN = re.compile(r'^\s*"(?P<name>\w+)":\s*(?P<dtype>[^,#]+?),?\s*(?:#\s*(?P<doc>.*))?$')
TABLE = re.compile(r"^(?P<table>[A-Z_]+_(?:COLUMNS|NULLABLE)): dict\[str, Any\] = \{$")
CSV_FILES = {
    "CPU_STAT": "cpu_stat.csv",
    "LIMITS": "limits.csv",
    "REQUEST": "requests.csv",
    "HOST_STAT": "host_stat.csv",
}


def csv_tables(source: str) -> str:
    """One table per CSV file: its columns, their types and the comment beside each in
    bundlefiles.py (a comment on the lines above a table is its introduction)."""
    tables: dict[str, list[tuple[str, str, bool, str]]] = {}
    intro: dict[str, list[str]] = {}
    comments: list[str] = []
    current = None
    for line in source.splitlines():
        if current is None:
            m = TABLE.match(line)
            if m:
                current = m["table"]
                key, kind = current.rsplit("_", 1)
                if comments:
                    intro.setdefault(key, []).append(" ".join(comments))
                comments = []
            elif line.startswith("#"):
                comments.append(line.lstrip("# ").strip())
            else:
                comments = []
            continue
        if line.startswith("}"):
            current = None
            continue
        m = COLUMN.match(line)
        if m:
            key, kind = current.rsplit("_", 1)
            dtype = m["dtype"].strip().removeprefix("np.").strip('"')
            tables.setdefault(key, []).append((m["name"], dtype, kind == "NULLABLE", (m["doc"] or "").strip()))
    if set(tables) != set(CSV_FILES):
        found = sorted(tables)
        raise ValueError(f"{BUNDLEFILES.name}: expected the column tables of {sorted(CSV_FILES)}, found {found}")
    out = []
    for key, fname in CSV_FILES.items():
        out += [f"### `{fname}`", ""]
        out += [cell(" ".join(intro.get(key, []))), ""] if intro.get(key) else []
        out += ["| column | type | may be empty | meaning |", "|---|---|---|---|"]
        out += [f"| `{n}` | {t} | {'yes' if na else ''} | {cell(doc)} |" for n, t, na, doc in tables[key]]
        out.append("")
    return "\n".join(out)


def results_table(paths: list[Path]) -> str:
    """The tables of the files, as one: the first file's header, every file's rows. Lines
    outside the table (an HTML comment saying which command wrote the file) are dropped."""
    header: list[str] | None = None
    rows: list[str] = []
    for path in paths:
        lines = [x.strip() for x in path.read_text().splitlines() if x.strip().startswith("|")]
        if len(lines) < 3 or not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[1]):
            raise ValueError(f"{path.relative_to(ROOT)}: no Markdown table")
        if header is None:
            header = lines[:2]
        elif lines[0] != header[0]:
            raise ValueError(f"{path.relative_to(ROOT)}: its columns differ from {paths[0].name}'s")
        rows += lines[2:]
    assert header is not None
    return "\n".join(header + rows)


WHATIF_FIGURES = {
    "throttled_pct": "throttled share, points",
    "exhausted_p50_ms": "exhaustion p50, ms",
    "cpus_frozen_p50": "CPUs frozen p50",
    "stall_ms_per_s": "stall, ms/s",
    "p99_pct": "p99, %",
    "throughput_pct": "throughput, %",
}


def whatif_errors(v: dict[str, Any]) -> str:
    """The held-out |error| per regime and figure (median / p90, n) as the package ships it."""
    head = "| regime | load | " + " | ".join(WHATIF_FIGURES.values()) + " |"
    rows = [head, "|---" * (len(WHATIF_FIGURES) + 2) + "|"]
    for regime, figs in v["regimes"].items():
        cells = [" and ".join(figs.get("loops") or ["–"])]
        for k in WHATIF_FIGURES:
            f = figs.get(k)
            cells.append(f"{f['median']:g} / {f['p90']:g} (n {f['n']})" if f else "–")
        rows.append(f"| {cell(regime)} | " + " | ".join(cells) + " |")
    note = (
        f"\n\n`gmpanalysis/whatif-validation.json`, {cell(v['date'])}: {v['predictions']} held-out predictions "
        f"of {len(v['runs'])} runs ({cell(v['estimator'])}; {cell(v['method'])})."
    )
    return "\n".join(rows) + note


def _subparsers(parser: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for action in getattr(parser, "_actions", []):
        if action.__class__.__name__ == "_SubParsersAction":
            out.update(action.choices)
    return out


def cli_help() -> str:
    """The help of ``gmpanalysis`` and of each subcommand, 100 columns wide."""
    from gmpanalysis.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        out: list[str] = []

        def walk(parser: Any, name: str, depth: int) -> None:
            out.extend([f"{'#' * min(depth, 4)} `{name}`", "", "```text", parser.format_help().rstrip(), "```", ""])
            for sub, p in _subparsers(parser).items():
                walk(p, f"{name} {sub}", depth + 1)

        walk(build_parser(), "gmpanalysis", 2)
        return "\n".join(out)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
