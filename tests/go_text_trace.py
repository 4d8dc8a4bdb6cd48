"""Convert Go's text trace format (the internal/trace test corpus, *.test txtar files) to the
binary wire format, following the grammar of the format notes:

    Trace Go1.22
    EventBatch gen=1 m=0 time=0 size=15
    ProcStatus dt=1 p=0 pstatus=1
    String id=1
        data="..."
    Stack id=17 nframes=3
        pc=4816080 func=30 file=31 line=45

Arguments are written in the order they appear (the corpus lists them in spec order).
Each batch is written with the size the text states; ``text_to_binary`` also returns the
batches whose encoding came out a different size (only deliberately cut cases have any),
which is how the converter checks itself against the corpus.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from gmpanalysis.gotrace import spec

_STRUCT = {
    "EventBatch": 1,
    "Stacks": 2,
    "Stack": 3,
    "Strings": 4,
    "String": 5,
    "CPUSamples": 6,
    "CPUSample": 7,
    "Frequency": 8,
    "ExperimentalBatch": 49,
    "Sync": 50,
    "ClockSnapshot": 51,
    "EndOfGeneration": 52,
}
_ARG = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def split_txtar(text: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    name = None
    for line in text.splitlines(keepends=True):
        m = re.match(r"^-- (\S+) --$", line.rstrip("\n"))
        if m:
            name = m.group(1)
            parts[name] = ""
        elif name is not None:
            parts[name] += line
    return parts


def text_to_binary(trace_text: str) -> tuple[bytes, list[tuple[int, int]]]:
    lines = [ln for ln in trace_text.splitlines() if ln.strip()]
    head = lines[0].split()
    assert head[0] == "Trace" and head[1].startswith("Go1."), head
    minor = int(head[1][4:])
    out = bytearray(f"go 1.{minor} trace".encode().ljust(16, b"\x00"))
    names = {name: eid for eid, (name, _) in spec.EVENTS.items()}
    names.update(_STRUCT)
    batch: bytearray | None = None
    batch_hdr: list[int] = []
    stated = 0
    mismatches: list[tuple[int, int]] = []

    def flush() -> None:
        nonlocal batch
        if batch is None:
            return
        if len(batch) != stated:
            mismatches.append((stated, len(batch)))
        gen, m, t = batch_hdr
        out.extend(b"\x01" + uvarint(gen) + uvarint(m) + uvarint(t) + uvarint(stated) + batch)
        batch = None

    for line in lines[1:]:
        if line.startswith("\t") or line.startswith(" "):
            args = dict(_ARG.findall(line))
            if "data" in args:
                data = ast.literal_eval(args["data"]).encode()
                batch.extend(uvarint(len(data)) + data)
            else:  # a stack frame
                for k in ("pc", "func", "file", "line"):
                    batch.extend(uvarint(int(args[k])))
            continue
        name, _, rest = line.partition(" ")
        vals = [v for _, v in _ARG.findall(rest)]
        if name == "EventBatch":
            flush()
            gen, m, t, size = (int(v) for v in vals)
            batch, batch_hdr, stated = bytearray(), [gen, m, t], size
            continue
        if name == "EndOfGeneration":
            flush()
            out.append(52)
            continue
        batch.append(names[name])
        for v in vals:
            batch.extend(uvarint(int(v)))
    flush()
    return bytes(out), mismatches


def load_case(path: Path) -> tuple[str, bytes, list[tuple[int, int]]]:
    parts = split_txtar(path.read_text())
    data, mismatches = text_to_binary(parts["trace"])
    return parts["expect"].strip(), data, mismatches
