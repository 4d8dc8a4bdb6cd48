"""Wire level: header, batches, generations, and the vectorised event walk.

Layout (see go-trace-format notes): a 16-byte header ``go 1.NN trace``, then batches
``01 gen m ts len payload`` (or ``31 exp gen m ts len payload``), and from Go 1.26 a bare
``34`` byte after each generation. Batches of generation N all precede those of N+1.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from ..errors import TraceFormatError, UnknownVersionWarning
from . import spec

HEADER_LEN = 16
# Generations start at 1 and the runtime starts a new one every second: 2^31 - 1 of them
# is 68 years of tracing, and the decoded columns keep the number as int32.
MAX_GENERATION = (1 << 31) - 1


@dataclasses.dataclass
class Batch:
    gen: int
    m: int  # thread id (kernel TID on Linux); NONE_ID for runtime/global batches
    ts: int  # trace ticks at the batch start
    start: int  # payload offset in the file
    end: int  # payload end (exclusive)
    exp: int | None = None  # experiment id of an experimental batch
    at: int = -1  # file offset of the batch header (its type byte)


@dataclasses.dataclass
class Generation:
    gen: int
    batches: list[Batch]
    start: int  # file offset of its first batch
    end: int  # file offset after its last batch


def parse_header(data: bytes | memoryview, source: str) -> int:
    """Return the minor version written in the header (22 for "go 1.22 trace")."""
    head = bytes(data[:HEADER_LEN])
    if not head.startswith(b"go 1."):
        raise TraceFormatError(
            f"{source} offset 0: not a Go execution trace (header {head[:16]!r}); expected 'go 1.NN trace' "
            "as written by runtime/trace, go test -trace or /debug/pprof/trace"
        )
    rest = head[5:]
    digits = rest[: len(rest) - len(rest.lstrip(b"0123456789"))]
    if not digits or not rest[len(digits) :].startswith(b" trace"):
        raise TraceFormatError(f"{source} offset 0: malformed trace header {head!r}")
    minor = int(digits)
    if len(data) < HEADER_LEN:
        raise TraceFormatError(
            f"{source} offset {len(data)}: the file ends inside the 16-byte header; it was cut off, copy it again"
        )
    if minor <= 21:
        raise TraceFormatError(
            f"{source} offset 0: Go 1.{minor} trace format (the pre-1.22 format, with TSC timestamps that cannot "
            "be tied to CLOCK_MONOTONIC) is not supported; re-record with Go >= 1.22"
        )
    if minor not in spec.KNOWN_VERSIONS and minor > max(spec.KNOWN_VERSIONS):
        warnings.warn(
            f"{source}: trace version go 1.{minor} is newer than this reader knows "
            f"(up to 1.{max(spec.KNOWN_VERSIONS)}); reading it on the rule that new versions only append event types",
            UnknownVersionWarning,
            stacklevel=3,
        )
    return minor


class _Short(Exception):
    """Ran out of bytes: the file is truncated here."""


def uvarint(data: bytes | memoryview, pos: int, end: int, source: str) -> tuple[int, int]:
    """Decode one unsigned LEB128 varint at pos; padded (non-minimal) forms are accepted.

    Go's binary.Uvarint limits: at most 10 bytes, and the 10th may only hold the 64th bit.
    """
    v = 0
    shift = 0
    for i in range(pos, min(end, pos + 10)):
        b = data[i]
        v |= (b & 0x7F) << shift
        if b < 0x80:
            if v >> 64:
                raise TraceFormatError(f"{source} offset {pos}: varint overflows 64 bits; the trace is corrupt")
            return v, i + 1
        shift += 7
    if end - pos < 10:
        raise _Short
    raise TraceFormatError(f"{source} offset {pos}: varint longer than 10 bytes; the trace is corrupt")


def batch_uvarint(data: bytes | memoryview, pos: int, end: int, source: str) -> tuple[int, int]:
    """A varint inside a batch: running out of bytes there means a corrupt batch."""
    try:
        return uvarint(data, pos, end, source)
    except _Short:
        raise TraceFormatError(
            f"{source} offset {pos}: a value runs past the end of its batch; the trace is corrupt"
        ) from None


def split_generations(data: bytes | memoryview, version: int, source: str) -> tuple[list[Generation], int | None]:
    """Frame the file into generations. Returns (complete generations, truncation offset or None).
    See :class:`GenerationSplitter`, which yields them one at a time."""
    sp = GenerationSplitter(data, version, source)
    gens = list(sp)
    return gens, sp.truncated_at


class GenerationSplitter:
    """Iterate over the complete generations of a trace, in file order, reading only batch
    headers; after the iteration, ``truncated_at`` is the offset of a cut, or None.

    A generation is complete when the next one begins (a batch of another generation, or the
    EndOfGeneration byte of Go >= 1.26), or, before 1.26, when the file ends cleanly after it
    and it holds the tables the runtime writes when a generation ends (:meth:`_closed`).
    A cut anywhere else drops the generation it falls in and reports where. Zero bytes to
    the end of the file, where they break the framing, are taken as its end (``zero_tail``:
    where they begin): what a file system leaves of the data a crash kept from reaching the
    disk once the file's size had grown. Beginning where a batch would (or a few bytes
    before: :data:`ZERO_SLACK`), they end the file cleanly there; inside a batch, they cut
    it as the end of the file there would.
    """

    def __init__(self, data: bytes | memoryview, version: int, source: str) -> None:
        self.data, self.version, self.source = data, version, source
        self.truncated_at: int | None = None
        self.zero_tail: int | None = None
        # (generation, offset) of a last generation the file ends after, at a batch's end,
        # that was never closed (:meth:`_closed`; from Go 1.26, no end marker)
        self.unclosed: tuple[int, int] | None = None

    def __iter__(self):  # noqa: ANN204 (a generator of Generation)
        data, version = self.data, self.version
        n = len(data)
        pos = HEADER_LEN
        cur: list[Batch] = []
        cur_gen: int | None = None
        prev_gen = 0  # generations only count up: a second trace.Start continues the numbering
        cur_start = pos
        has_eog = version >= 26
        while pos < n:
            if data[pos] == spec.EV_END_OF_GENERATION and has_eog:
                if cur:
                    yield Generation(cur_gen or 0, cur, cur_start, pos)
                    prev_gen = cur_gen or 0
                cur, cur_gen = [], None
                pos += 1
                cur_start = pos
                continue
            try:
                batch = self._batch(pos, n, cur_gen, prev_gen)
            except _Short:
                self.truncated_at = pos
                return
            except TraceFormatError as e:
                z = zero_run_start(data)
                if z >= n or z > pos + BATCH_HEADER_MAX or _second_header(data, pos):
                    # no zeros, or not what broke the framing (a second trace's header has some);
                    # before 1.26 the generation before a batch of another one is whole
                    if isinstance(e, _AfterGeneration):
                        yield Generation(cur_gen or 0, cur, cur_start, pos)
                    raise
                self.zero_tail = z
                if z > pos:  # inside the header of a batch being written: a cut there
                    self.truncated_at = pos
                    return
                if cur and z < cur[-1].start:  # inside the batch before's header, which they made up
                    self.truncated_at = cur[-1].at
                    return
                if pos - z > ZERO_SLACK:  # inside the batch before's events: a cut there
                    self.truncated_at = z
                    return
                n = pos  # where a batch begins: the file ends here
                break
            if batch is None:
                self.truncated_at = pos
                return
            if cur_gen is not None and batch.gen != cur_gen:
                yield Generation(cur_gen, cur, cur_start, pos)
                prev_gen = cur_gen
                cur, cur_gen = [], None
                cur_start = pos
            cur_gen = batch.gen
            cur.append(batch)
            pos = batch.end
        if cur and self.zero_tail is None and len(data) - (z := zero_run_start(data)) >= ZERO_TAIL_MIN:
            # zeros to the end inside the last batch: no event is encoded so (see ZERO_TAIL_MIN)
            self.truncated_at = self.zero_tail = z
            return
        if has_eog and cur:
            # Go >= 1.26 ends every generation with the marker: one without it was cut off
            self.truncated_at = cur[-1].end
            if cur[-1].end == pos:  # at a batch's end: never closed rather than cut in a batch
                self.unclosed = (cur_gen or 0, cur_start)
            return
        if cur and not self._closed(cur):
            self.truncated_at, self.unclosed = pos, (cur_gen or 0, cur_start)
            return
        if cur:
            yield Generation(cur_gen or 0, cur, cur_start, pos)

    def _closed(self, batches: list[Batch]) -> bool:
        """Before Go 1.26, whether a generation the file ends after was written to its end:
        the runtime closes each with its CPU samples, its stack table and last its string
        table, after a frequency batch up to Go 1.24; every generation has strings (the
        runtime registers the GC workers' labels and the block and stop reasons in each one's
        table: traceRegisterLabelsAndReasons). A process that exits without stopping its
        trace (os.Exit, a crash, a cut download of /debug/pprof/trace) leaves its last
        generation without them: its events name strings and stacks never written. A string
        table long enough to fill several batches, cut between two, passes as closed (rare:
        the tables are written in a moment at the generation's end)."""
        data = self.data
        kinds = {data[b.start] for b in batches if b.exp is None and b.end > b.start}
        return spec.EV_STRINGS in kinds and (self.version >= 25 or spec.EV_FREQUENCY in kinds)

    def _batch(self, pos: int, n: int, cur_gen: int | None, prev_gen: int) -> Batch | None:
        """The batch whose header is at pos (None: the file ends inside it); raises
        :class:`TraceFormatError` where there is none, ``_Short`` where its header is cut."""
        data, source = self.data, self.source
        b = data[pos]
        if b == spec.EV_EVENT_BATCH:
            exp = None
            p = pos + 1
        elif b == spec.EV_EXPERIMENTAL_BATCH:
            if pos + 1 >= n:
                raise _Short
            exp = data[pos + 1]
            p = pos + 2
        elif _second_header(data, pos):
            raise TraceFormatError(
                f"{source} offset {pos}: a second trace's header ({bytes(data[pos : pos + 13]).decode('latin-1')!r}) "
                "begins here: two "
                f"traces were written into one file; split it there (head -c {pos}, tail -c +{pos + 1}) to read each"
            )
        else:
            raise TraceFormatError(
                f"{source} offset {pos}: expected a batch (byte 0x01) but found 0x{b:02x}; the trace is "
                "corrupt or was written by an unsupported tracer"
            )
        gen, p = uvarint(data, p, n, source)
        m, p = uvarint(data, p, n, source)
        ts, p = uvarint(data, p, n, source)
        length, p = uvarint(data, p, n, source)
        if length > 1 << 20:
            raise TraceFormatError(
                f"{source} offset {pos}: batch claims {length} bytes (the runtime writes "
                "at most 64 KiB); the trace is corrupt"
            )
        if p + length > n:
            return None
        if cur_gen is not None and gen != cur_gen and self.version >= 26:
            raise TraceFormatError(
                f"{source} offset {pos}: batch of generation {gen} inside generation {cur_gen} "
                "without an end-of-generation marker; the trace is corrupt"
            )
        # before 1.26 a batch of another generation ends the one before, whatever its own
        after = cur_gen is not None and gen != cur_gen
        if gen == 0 or gen > MAX_GENERATION:
            raise _generation_error(
                after,
                f"{source} offset {pos}: generation {gen} does not exist (they count from 1, one a "
                "second); the trace is corrupt",
            )
        last = prev_gen if cur_gen is None or gen == cur_gen else cur_gen
        if (cur_gen is None or gen != cur_gen) and gen <= last:
            # Go's reader refuses this too; reading on would mix two generations' string tables
            raise _generation_error(
                after,
                f"{source} offset {pos}: generation {gen} after generation {last}; generations "
                "only count up, so the trace is corrupt or pieced together from several files",
            )
        return Batch(gen, m, ts, p, p + length, exp, pos)


class _AfterGeneration(TraceFormatError):
    """A batch of an impossible generation right after a generation of a Go < 1.26 trace,
    which it ends: that one is whole, and is yielded before the error."""


def _second_header(data: bytes | memoryview, pos: int) -> bool:
    """A trace's header ("go 1.NN trace") begins at pos: a second trace in the file."""
    return bytes(data[pos : pos + 5]) == b"go 1."


def _generation_error(after: bool, text: str) -> TraceFormatError:
    """The error of a batch of an impossible generation (``after``: one that ends the
    generation before it)."""
    return _AfterGeneration(text) if after else TraceFormatError(text)


# the most bytes a batch header takes: its type (and an experimental batch's kind), and four
# varints of up to 10 bytes each
BATCH_HEADER_MAX = 2 + 4 * 10


# a batch may end in zero bytes of its own (an event's last arguments, varints of 0): zeros
# that begin no more than this before a batch boundary and run to the end of the file are
# taken to begin at the boundary
ZERO_SLACK = 8
# zero bytes to the end of the file, as many as this, inside a batch are taken as damage: an
# event begins with its type byte, never 0, and its arguments are a few varints, so only a
# string of NUL bytes could encode so many; a crash leaves whole blocks of them (512 bytes and
# up). Fewer are left to the decoder, which refuses them where they break an event.
ZERO_TAIL_MIN = 64


def zero_run_start(data: bytes | memoryview) -> int:
    """Where the zero bytes that run to the end of ``data`` begin (its length: none), read
    back from the end a MiB at a time (on an error path, or once at the end of every read,
    where a last byte other than 0 answers at once)."""
    end = len(data)
    if end == 0 or data[end - 1] != 0:
        return end
    step = 1 << 20
    zeros = bytes(step)
    while end > 0:
        a = max(end - step, 0)
        piece = bytes(data[a:end])
        if piece != zeros[: end - a]:
            return a + len(piece.rstrip(b"\0"))
        end = a
    return 0


@dataclasses.dataclass
class Walk:
    """Events of a set of event batches, in file order (batch by batch, in order)."""

    tok: np.ndarray  # token index of the event's type byte
    batch: np.ndarray  # index into the batch list
    first: np.ndarray  # first byte (the event type)


def tokenize(buf: np.ndarray, lo: int, hi: int, piece: int = 1 << 20) -> np.ndarray:
    """Start offsets (relative to lo) of the tokens of buf[lo:hi]: a token ends at every byte
    < 0x80, so each uvarint and each type byte < 0x80 is one token.

    Filled piece by piece into one int32 array: np.flatnonzero's int64 result for a whole
    chunk would cost 8 bytes per token at once.
    """
    seg = buf[lo:hi]
    total = int(np.count_nonzero(seg < 0x80))
    starts = np.empty(total + 1, dtype=np.int32)
    starts[0] = 0
    k = 1
    for a in range(0, len(seg), piece):
        ends = np.flatnonzero(seg[a : a + piece] < 0x80)
        starts[k : k + len(ends)] = ends + (a + 1)
        k += len(ends)
    return starts


# below this many unfinished batches, the walk goes on one event at a time in Python
TAIL_BATCHES = 8


def walk_events(buf: np.ndarray, lo: int, starts: np.ndarray, batches: list[Batch], version: int, source: str) -> Walk:
    """Find every event of the given event batches, all batches advancing in lockstep.

    ``starts`` are the token starts of buf[lo:...] (see :func:`tokenize`). Each step moves
    every unfinished batch forward by one event: the jump, in tokens, depends only on the
    event's first byte.
    """
    jump = spec.jump_table(version)
    nb = len(batches)
    if nb == 0:
        z = np.zeros(0, dtype=np.int64)
        return Walk(z, z, z.astype(np.uint8))
    # in the index's own type: searchsorted would otherwise convert the whole index first
    b_start = np.array([b.start - lo for b in batches], dtype=np.int64).astype(starts.dtype)
    b_end = np.array([b.end - lo for b in batches], dtype=np.int64).astype(starts.dtype)
    cur = np.searchsorted(starts, b_start).astype(np.int32)
    end_tok = np.searchsorted(starts, b_end).astype(np.int32)
    bad = starts[np.minimum(cur, len(starts) - 1)] != b_start
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceFormatError(f"{source} offset {batches[i].start}: batch payload does not start on an event")
    # a batch must end where a token ends: else its last varint runs on into what follows
    bad = (end_tok >= len(starts)) | (starts[np.minimum(end_tok, len(starts) - 1)] != b_end)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceFormatError(
            f"{source} offset {batches[i].end}: an event runs past the end of its batch "
            f"(batch at offset {batches[i].start}); the trace is corrupt"
        )
    seg_first = buf[lo:]
    active = np.flatnonzero(cur < end_tok).astype(np.int32)
    toks: list[np.ndarray] = []
    bidx: list[np.ndarray] = []
    firsts: list[np.ndarray] = []
    c = cur[active]
    e = end_tok[active]
    # a byte that is no event type jumps far past any batch end: the batch then leaves the
    # walk as one that ran over its end, and is told apart below
    idx_t = np.int32 if len(starts) < 1 << 30 else np.int64  # c + the far jump must not wrap
    jump32 = np.where(jump == 0, len(starts), jump).astype(idx_t)
    c, e = c.astype(idx_t), e.astype(idx_t)
    while active.size > TAIL_BATCHES:
        f = seg_first[starts[c]]
        toks.append(c)
        bidx.append(active)
        firsts.append(f)
        c = c + jump32[f]
        keep = c < e
        if not keep.all():
            gone = ~keep
            if (c[gone] > e[gone]).any():
                k = int(np.flatnonzero(gone & (c > e))[0])
                t = int(toks[-1][k])
                if jump[int(f[k])] == 0:
                    raise TraceFormatError(
                        f"{source} offset {lo + int(starts[t])}: byte 0x{int(f[k]):02x} is not an event type of "
                        f"trace version go 1.{version}; the trace is corrupt"
                    )
                raise TraceFormatError(
                    f"{source} offset {batches[int(active[k])].end}: an event runs past the end of its batch "
                    f"(batch at offset {batches[int(active[k])].start}); the trace is corrupt"
                )
            active, c, e = active[keep], c[keep], e[keep]
    # The last few (long) batches: one numpy step per event would cost more in overhead than
    # the events themselves; walk them one event at a time
    jl = jump.tolist()
    for b, c0, e0 in zip(active.tolist(), c.tolist(), e.tolist(), strict=True):
        fb = seg_first[starts[c0:e0]].tolist()  # first byte of every token to the batch end
        k, ks, fs = c0, [], []
        while k < e0:
            f = fb[k - c0]
            j = jl[f]
            if j == 0:
                raise TraceFormatError(
                    f"{source} offset {lo + int(starts[k])}: byte 0x{f:02x} is not an event type of trace version "
                    f"go 1.{version}; the trace is corrupt"
                )
            ks.append(k)
            fs.append(f)
            k += j
        if k > e0:
            raise TraceFormatError(
                f"{source} offset {batches[b].end}: an event runs past the end of its batch "
                f"(batch at offset {batches[b].start}); the trace is corrupt"
            )
        toks.append(np.array(ks, dtype=np.int32))
        bidx.append(np.full(len(ks), b, dtype=np.int32))
        firsts.append(np.array(fs, dtype=np.uint8))
    tok = np.concatenate(toks)
    del toks
    bi = np.concatenate(bidx)
    del bidx
    fi = np.concatenate(firsts)
    del firsts
    # step-major -> batch-major, keeping each batch's steps in order
    order = np.argsort(bi, kind="stable")
    w = Walk(tok[order], bi[order], fi[order])
    del tok, bi, fi, order
    _check_varints(buf, lo, starts, cur, end_tok, w, source)
    return w


def _check_varints(
    buf: np.ndarray, lo: int, starts: np.ndarray, cur: np.ndarray, end_tok: np.ndarray, w: Walk, source: str
) -> None:
    """Every varint of every event, used or not, within Go's limits (at most 10 bytes, the
    10th holding at most the 64th bit), as Go's reader and the compiled decoder have it.
    The tokens of the event batches are exactly their events' varints and type bytes; an
    experimental type byte shares its token with the dt after it."""
    n = len(starts) - 1
    span = np.zeros(n + 1, dtype=np.int32)
    np.add.at(span, cur, 1)
    np.add.at(span, end_tok, -1)
    inside = np.cumsum(span[:n]) > 0
    first = starts[:-1].astype(np.int64)
    length = np.diff(starts).astype(np.int64)
    exp = w.tok[w.first >= 128]
    first[exp] += 1
    length[exp] -= 1
    ten = np.flatnonzero(inside & (length == 10))
    over = np.zeros(n, dtype=bool)
    over[ten] = buf[lo + first[ten] + 9] > 1
    bad = np.flatnonzero((inside & (length > 10)) | over)
    if bad.size:
        k = int(bad[0])
        what = "longer than 10 bytes" if length[k] > 10 else "overflows 64 bits"
        raise TraceFormatError(f"{source} offset {lo + int(first[k])}: varint {what}; the trace is corrupt")


def token_values(
    buf: np.ndarray,
    lo: int,
    starts: np.ndarray,
    tok: np.ndarray,
    source: str,
    skip_first: np.ndarray | None = None,
) -> np.ndarray:
    """Decode the uvarints that start at the given tokens (vectorised; returns uint64).

    ``skip_first`` marks tokens whose first byte is an experimental type byte merged with
    the varint that follows it. Varints past Go's limits (more than 10 bytes, or a 10th
    byte holding more than the 64th bit) raise TraceFormatError naming the offset.
    """
    s = starts[tok].astype(np.int64) + lo
    L = starts[tok + 1].astype(np.int64) + lo - s
    if skip_first is not None:
        s = s + skip_first
        L = L - skip_first
    out = (buf[s] & 0x7F).astype(np.uint64)
    idx = np.flatnonzero(L > 1)
    k = 1
    while idx.size:
        if k == 9:
            over = idx[(L[idx] > 10) | (buf[s[idx] + 9] > 1)]
            if over.size:
                off = int(s[over[0]])
                what = "longer than 10 bytes" if L[over[0]] > 10 else "overflows 64 bits"
                raise TraceFormatError(f"{source} offset {off}: varint {what}; the trace is corrupt")
        out[idx] |= (buf[s[idx] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        k += 1
        idx = idx[L[idx] > k]
    return out
