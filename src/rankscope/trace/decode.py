"""Decode trace files into events, reading only what is shown, in bounded memory.

Everything reads through a :class:`Source` (``os.pread`` on a file, slices of bytes in tests), a
chunk of :data:`CHUNK_RECORDS` records at a time, skipping the holes of a sparse file:

- :func:`read_layout` reads the header, metadata and names (both capped: :data:`fmt.NAMES_MAX`);
- :func:`iter_events` yields every event oldest first (``trace show``, ``trace grep``);
- :func:`read_tail` decodes only the newest records (``trace tail``), at most
  :data:`TAIL_WINDOW_MAX` of them, and finds the starting thread's last event further back by a
  byte search, without decoding what lies between.

A ring's newest record is found by one pass over the time stamps (C-speed ``max`` per chunk).
A file that is not a rankscope trace, is of a newer version, is cut short or has damaged
metadata raises :class:`~rankscope.errors.BadInputError` with one line naming the file and what
is wrong (exit 8; ``tail``/``grep`` list it as unreadable and go on with the other files).
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from rankscope.errors import BadInputError
from rankscope.serial import SKIP
from rankscope.trace import format as fmt
from rankscope.trace.stacks import CUT_FRAME, Frame, OpenStack, StackBuilder


class Source:
    """The bytes of one trace file."""

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` (fewer at the end of the file)."""
        raise NotImplementedError

    def next_data(self, offset: int) -> int:
        """Where data resumes at or after ``offset`` (past a hole of a sparse file: never-written
        slots, skipped unread); ``offset`` itself where that is not known."""
        return offset


class BytesSource(Source):
    def __init__(self, data: bytes) -> None:
        self.view = memoryview(data)

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self.view[offset : offset + size])


#: Records read and decoded at a time (1.5 MiB).
CHUNK_RECORDS = 1 << 16
#: ``trace tail`` decodes at most this many of the newest records per file.
TAIL_WINDOW_MAX = 1 << 16
#: Frames of a sampled or whole stack kept while it is assembled (the writer writes at most 64 and 256).
STACK_MAX = 256
#: MARK records by their line field: (event kind, text)
_MARKS = {
    fmt.MARK_START: ("start", "trace start"),
    fmt.MARK_STOP: ("stop", "trace stop"),
    fmt.MARK_LAP: ("lap", "whole stacks follow"),
    fmt.MARK_LAP_END: ("lap end", "every thread's stack written"),
}


@dataclass(frozen=True)
class CodeName:
    __slots__ = ("file", "line", "name")  # one per function named in a file: kept small
    file: str
    line: int
    name: str


@dataclass(frozen=True)
class Event:
    """One decoded record. ``t`` is seconds since the trace started; ``stack`` is set on samples."""

    t: float
    kind: str
    thread: int
    file: str
    line: int
    name: str
    stack: tuple[tuple[str, int, str], ...] = ()

    @property
    def location(self) -> str:
        """``train.py:88 step`` (the file's base name)."""
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line} {self.name}" if self.file else self.name


@dataclass
class TraceData:
    #: ``trace show --json`` prints this head, then the events.
    SCHEMA: ClassVar[str] = "rankscope.trace.show/1"

    path: str
    version: int
    ring: bool
    flags: int
    capacity: int
    wraps: int
    meta: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    #: records in the file (written slots of the ring, or appended records)
    records: int = 0
    #: ``trace tail``: the starting thread's last event when it lies before the decoded records
    last_seen: Optional[Event] = field(default=None, metadata=SKIP)
    #: ``trace tail``: each thread's open calls at the end of the file (stacks.OpenStack)
    stacks: dict[int, Any] = field(default_factory=dict, metadata=SKIP)

    @property
    def host(self) -> str:
        return str(self.meta.get("host") or "?")

    @property
    def rank(self) -> Optional[int]:
        return _int(self.meta.get("rank"))

    @property
    def pid(self) -> int:
        return _int(self.meta.get("pid")) or 0


@dataclass(frozen=True)
class Layout:
    """What the header says about one file, checked against its size."""

    path: str
    version: int
    flags: int
    ring: bool
    capacity: int
    wraps: int
    meta: dict[str, Any]
    names: dict[int, CodeName]
    #: byte offset of the first record, and the record slots the file holds
    start: int
    slots: int
    #: (ticks0, ns0, ns per tick) when records carry CPU counter ticks
    to_ns: Optional[tuple[int, int, float]]

    @property
    def thread(self) -> Optional[int]:
        """The thread that started tracing, from the metadata."""
        return _int(self.meta.get("thread"))

    def data(self, records: int = 0, events: Optional[list[Event]] = None) -> TraceData:
        return TraceData(
            self.path,
            self.version,
            self.ring,
            self.flags,
            self.capacity,
            self.wraps,
            self.meta,
            events or [],
            records,
        )


def _bad(path: str, what: str) -> BadInputError:
    return BadInputError(
        f"{path}: not a readable rankscope trace ({what})", "pass a trace-* file written by rankscope trace"
    )


def _int(value: Any) -> Optional[int]:
    """An integer of the metadata that fits 64 bits, else None (hostile metadata holds anything)."""
    if isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < 1 << 64:
        return value
    return None


def parse_names(region: bytes) -> dict[int, CodeName]:
    names: dict[int, CodeName] = {}
    files: dict[str, str] = {}  # one string per file name, however many functions it has
    for line in region.decode("utf-8", "replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 4:
            continue  # a line cut by a crash while it was written
        try:
            code_id, first_line = int(parts[0]), int(parts[2])
        except ValueError:  # not a number, or more digits than int() takes
            continue
        file = files.setdefault(parts[1], parts[1])
        names[code_id] = CodeName(file, first_line, parts[3])
    return names


def read_layout(path: str, source: Source, size: int) -> Layout:
    """The header, metadata and names of a trace file of ``size`` bytes (BadInputError if damaged)."""
    if size < fmt.HEADER_SIZE:
        raise _bad(path, f"{size} bytes, shorter than its {fmt.HEADER_SIZE}-byte header")
    head = source.read(0, fmt.HEADER_SIZE)
    if len(head) < fmt.HEADER_SIZE:
        raise _bad(path, f"truncated while read: {len(head)} bytes")
    magic, version, flags, words, capacity, names_bytes, names_used, wraps, meta_len = fmt.HEADER.unpack_from(
        head
    )
    if magic != fmt.MAGIC:
        raise _bad(path, "no trace header")
    if version > fmt.VERSION:
        raise BadInputError(
            f"{path}: trace format version {version} is newer than this rankscope's {fmt.VERSION}",
            "read it with a newer rankscope",
        )
    if words != fmt.RECORD_WORDS or names_used > names_bytes or meta_len > fmt.META_MAX:
        raise _bad(path, "damaged header")
    if names_bytes > fmt.NAMES_MAX:
        raise _bad(path, f"damaged header: a names region of {names_bytes} bytes, at most {fmt.NAMES_MAX}")
    ring = bool(flags & fmt.FLAG_RING)
    start = fmt.HEADER_SIZE + names_bytes
    if ring and size < start + capacity * fmt.RECORD_BYTES:
        raise _bad(path, f"truncated: {size} bytes of {start + capacity * fmt.RECORD_BYTES}")
    if not ring and size < start:
        raise _bad(path, f"truncated: {size} bytes, its names region ends at {start}")
    try:
        meta = json.loads(head[fmt.META_OFFSET : fmt.META_OFFSET + meta_len])
    except (ValueError, RecursionError):  # RecursionError: [[[[...]]]] nested past the parser's depth
        raise _bad(path, "damaged metadata") from None
    if not isinstance(meta, dict):
        raise _bad(path, "damaged metadata")
    names = parse_names(source.read(fmt.HEADER_SIZE, names_used))
    slots = capacity if ring else (size - start) // fmt.RECORD_BYTES
    return Layout(
        path,
        version,
        flags,
        ring,
        capacity if ring else 0,
        wraps,
        meta,
        names,
        start,
        slots,
        _converter(head, flags),
    )


def _converter(head: bytes, flags: int) -> Optional[tuple[int, int, float]]:
    """(ticks0, ns0, ns per tick) when records carry CPU counter ticks, else None (they are ns)."""
    if not flags & fmt.FLAG_TICKS:
        return None
    ticks0, ns0, ticks1, ns1 = fmt.CALIBRATION.unpack_from(head, fmt.CALIBRATION_OFFSET)
    if ticks1 <= ticks0:
        return (ticks0, ns0, 0.0)
    return (ticks0, ns0, (ns1 - ns0) / (ticks1 - ticks0))


# -- records ---------------------------------------------------------------------------------------


def _chunk(layout: Layout, source: Source, first: int, count: int) -> array[int]:
    """Records ``first`` .. ``first + count`` as 64-bit words (fewer where the file was cut meanwhile)."""
    offset, size = layout.start + first * fmt.RECORD_BYTES, count * fmt.RECORD_BYTES
    table: array[int] = array("Q")
    if source.next_data(offset) >= offset + size:
        return table  # a hole: nothing was ever written there
    raw = source.read(offset, size)
    table.frombytes(raw[: len(raw) // fmt.RECORD_BYTES * fmt.RECORD_BYTES])
    if table.itemsize != 8:  # pragma: no cover - every Linux platform
        raise _bad(layout.path, "unsupported platform word size")
    if sys.byteorder == "big":  # pragma: no cover - the file is little-endian
        table.byteswap()
    return table


def _index(layout: Layout, source: Source) -> tuple[int, int]:
    """(the newest slot of a ring, or -1; written records), one pass over the time stamps."""
    best, newest, written = 0, -1, 0
    for first in range(0, layout.slots, CHUNK_RECORDS):
        times = _chunk(layout, source, first, min(CHUNK_RECORDS, layout.slots - first))[0::3]
        written += len(times) - times.count(0)
        top = max(times, default=0)
        if top > best:
            best, newest = top, first + times.index(top)
    return newest, written


def _ranges(layout: Layout, newest: int) -> list[tuple[int, int]]:
    """Slot ranges oldest first: a ring's oldest slot follows its newest; appended records in order."""
    if not layout.ring:
        return [(0, layout.slots)]
    if newest < 0:
        return []
    return [(newest + 1, layout.slots), (0, newest + 1)]


def forward(layout: Layout, source: Source, ranges: list[tuple[int, int]]) -> Iterator[array[int]]:
    for lo, hi in ranges:
        for first in range(lo, hi, CHUNK_RECORDS):
            table = _chunk(layout, source, first, min(CHUNK_RECORDS, hi - first))
            if table:
                yield table


def _backward(layout: Layout, source: Source, ranges: list[tuple[int, int]]) -> Iterator[array[int]]:
    """Chunks of records, newest chunk first."""
    for lo, hi in reversed(ranges):
        end = hi
        while end > lo:
            first = max(lo, end - CHUNK_RECORDS)
            yield _chunk(layout, source, first, end - first)
            end = first


class Decoder:
    """Records to events, chunk by chunk, keeping only each thread's sampled stack being assembled."""

    def __init__(self, layout: Layout) -> None:
        self.names = layout.names
        self.to_ns = layout.to_ns
        self.clock0 = _int(layout.meta.get("clock_ns")) or 0
        self.stacks: dict[int, deque[tuple[str, int, str]]] = {}
        self.last_stack: dict[int, tuple[tuple[str, int, str], ...]] = {}

    def events(self, table: array[int], first: int = 0) -> Iterator[Event]:
        unknown = CodeName("", 0, "?")
        names, to_ns, clock0 = self.names, self.to_ns, self.clock0
        for i in range(3 * first, len(table) - 2, 3):
            t_ns, word, tid = table[i], table[i + 1], table[i + 2]
            if not t_ns:
                continue  # never written
            kind = word & 0xFF
            code_id = word >> 32
            line = (word >> 8) & 0xFFFFFF
            if to_ns is not None:
                t_ns = int(to_ns[1] + (t_ns - to_ns[0]) * to_ns[2])
            t = (t_ns - clock0) / 1e9 if clock0 else 0.0
            if kind == fmt.MARK:
                what = _MARKS.get(line)
                if what is not None:
                    yield Event(t, what[0], tid, "", 0, what[1])
                continue
            if kind == fmt.PROGRESS:
                yield Event(t, "progress", tid, "", 0, f"step {word >> 8}")
                continue
            cn = names.get(code_id, unknown)
            file = cn.file
            if kind == fmt.SAMPLE_FRAME or kind == fmt.STACK_FRAME:
                stack = self.stacks.get(tid)
                if stack is None:
                    stack = self.stacks[tid] = deque(maxlen=STACK_MAX)
                stack.append((file, line, cn.name))
                continue
            if kind == fmt.STACK_END:
                frames = tuple(self.stacks.pop(tid, ()))
                if line & 1:  # the writer left the outermost calls out
                    frames = (CUT_FRAME, *frames)
                # the thread's name (version 2 writers name it; "?" where not)
                named = cn.name if file == fmt.THREAD_FILE else "?"
                yield Event(t, "stack", tid, "", len(frames), named, frames)
                continue
            if kind == fmt.SAMPLE_LEAF:
                frames = (*self.stacks.pop(tid, ()), (file, line, cn.name))
                self.last_stack[tid] = frames
                yield Event(t, "sample", tid, file, line, cn.name, frames)
                continue
            if kind == fmt.SAMPLE_SAME:
                frames = self.last_stack.get(tid, ())
                f, ln, nm = frames[-1] if frames else ("", 0, "(same stack as before: overwritten)")
                yield Event(t, "sample", tid, f, ln, nm, frames)
                continue
            name = fmt.KIND_NAMES.get(kind)
            if name is None:
                continue  # a torn record
            if kind in (fmt.CALL, fmt.RETURN, fmt.UNWIND) and not line:
                line = cn.line
            yield Event(t, name, tid, file, line, cn.name)


def iter_events(layout: Layout, source: Source) -> tuple[TraceData, Iterator[Event]]:
    """The file's summary (``records`` counted) and its events oldest first, decoded as they are read."""
    newest, written = _index(layout, source)
    decoder = Decoder(layout)

    def events() -> Iterator[Event]:
        for table in forward(layout, source, _ranges(layout, newest)):
            yield from decoder.events(table)

    return layout.data(written), events()


def read_tail(layout: Layout, source: Source, last: int) -> TraceData:
    """The last ``last`` events of the file, and (``last_seen``) the last event of the thread that
    started tracing when it is not among them.

    Decoded: the newest records holding that thread's last ``last`` events (sample frames do not
    count), at most :data:`TAIL_WINDOW_MAX` records; the thread's last event further back is found
    by :func:`_last_of_thread`. A job's many files each keep only these few events.
    """
    if layout.ring:
        newest, written = _index(layout, source)
    else:
        newest, written = -1, layout.slots  # appended: the end is the end of the file
    ranges = _ranges(layout, newest)
    thread, wanted = layout.thread, max(last, 1)
    shown = _SHOWN
    window: list[tuple[int, array[int]]] = []
    taken, seen = 0, 0
    for table in _backward(layout, source, ranges):
        cut = 0
        for i in range(len(table) // 3 - 1, -1, -1):
            if (
                table[3 * i]
                and table[3 * i + 1] & 0xFF in shown
                and (thread is None or table[3 * i + 2] == thread)
            ):
                seen += 1
                if seen >= wanted:
                    cut = i
                    break
        window.append((cut, table))
        taken += len(table) // 3 - cut
        if seen >= wanted or taken >= TAIL_WINDOW_MAX:
            break
    decoder = Decoder(layout)
    events = [
        e
        for cut, table in reversed(window)
        for e in decoder.events(table, cut)
        if e.kind not in _WHOLE_STACKS
    ]
    # kept: the last ``last`` events (what tail shows), and the starting thread's last one (where it is)
    trace = layout.data(written, events[-wanted:])
    if thread is not None and not any(e.thread == thread for e in trace.events):
        found = (e for e in reversed(events) if e.thread == thread and e.kind != "start")
        trace.last_seen = next(found, None) or _last_of_thread(layout, source, ranges, thread, taken)
    trace.stacks = open_stacks(layout, source, newest)
    return trace


#: Records that count as a thread's events in the tail (not the parts of stacks, nor lap marks).
_SHOWN = frozenset(
    (fmt.CALL, fmt.RETURN, fmt.LINE, fmt.UNWIND, fmt.SAMPLE_LEAF, fmt.SAMPLE_SAME, fmt.MARK, fmt.PROGRESS)
)
#: Decoded events that are the writer's whole stacks, not the program's own
_WHOLE_STACKS = frozenset(("stack", "lap", "lap end"))
#: Marks that do not say where a thread was: the start, and a lap's (any thread writes those)
_NOT_SEEN_MARKS = frozenset(fmt.MARK | (m << 8) for m in (fmt.MARK_START, fmt.MARK_LAP, fmt.MARK_LAP_END))


def _last_of_thread(
    layout: Layout, source: Source, ranges: list[tuple[int, int]], thread: int, skip: int
) -> Optional[Event]:
    """The newest call, return, line, unwind, sample or stop of ``thread`` before the newest ``skip``
    records: a byte search for its ident, no record decoded but the one found."""
    if not 0 <= thread < 1 << 64:
        return None
    pattern = struct.pack("=Q", thread)  # the table's own byte order
    offset = 2 * 8  # the thread ident is a record's third word
    wanted = (fmt.CALL, fmt.RETURN, fmt.LINE, fmt.UNWIND, fmt.SAMPLE_LEAF, fmt.MARK, fmt.PROGRESS)
    decoder = Decoder(layout)
    for table in _backward(layout, source, ranges):
        count = len(table) // 3
        if skip >= count:
            skip -= count
            continue
        raw = table[: 3 * (count - skip)].tobytes()
        skip = 0
        at = len(raw)
        while True:
            at = raw.rfind(pattern, 0, at + len(pattern) - 1)
            if at < 0:
                break
            if at % fmt.RECORD_BYTES != offset:
                continue
            i = at // fmt.RECORD_BYTES
            word = table[3 * i + 1]
            if not table[3 * i] or word & 0xFF not in wanted or word in _NOT_SEEN_MARKS:
                continue
            return next(decoder.events(table[3 * i : 3 * i + 3]), None)
    return None


def decode(path: str, data: bytes, last: Optional[int] = None) -> TraceData:
    """Every event of one trace file held in memory, oldest first; with ``last``, only the newest
    (see :func:`read_tail`)."""
    source = BytesSource(data)
    layout = read_layout(path, source, len(data))
    if last is not None:
        return read_tail(layout, source, last)
    trace, events = iter_events(layout, source)
    trace.events = list(events)
    return trace


def stack_ranges(layout: Layout, newest: int) -> list[tuple[int, int]]:
    """The records that rebuild the stacks: from the latest lap's start to the newest record.

    A ring's current lap starts at slot 0 (where the ring never wrapped, slot 0 is the start of the
    trace); a ``--full`` file's last chunk starts with its lap's whole stacks (format version 2;
    a version 1 file is read from its start).
    """
    if layout.ring:
        return [(0, newest + 1)] if newest >= 0 else []
    if layout.slots <= 0:
        return []
    first = 0 if layout.version < 2 else (layout.slots - 1) // fmt.FULL_CHUNK_RECORDS * fmt.FULL_CHUNK_RECORDS
    return [(first, layout.slots)]


def open_stacks(layout: Layout, source: Source, newest: int) -> dict[int, OpenStack]:
    """Every thread's open calls at the end of the file, and the starting thread's in any case.

    Reads the records a chunk at a time and builds no event objects (a full 6 MiB lap is 262,144
    records): only calls, returns and whole stacks touch the per-thread stacks.
    """
    builder = StackBuilder()
    names = layout.names
    unknown = CodeName("", 0, "?")
    parts: dict[int, deque[Frame]] = {}  # whole stacks and samples being assembled
    last_sample: dict[int, tuple[Frame, ...]] = {}
    for table in forward(layout, source, stack_ranges(layout, newest)):
        for i in range(0, len(table) - 2, 3):
            if not table[i]:
                continue
            word, thread = table[i + 1], table[i + 2]
            kind = word & 0xFF
            if kind == fmt.MARK:
                mark = (word >> 8) & 0xFFFFFF
                if mark == fmt.MARK_LAP:
                    builder.lap()
                elif mark == fmt.MARK_LAP_END:
                    builder.lap_end()
                elif mark in (fmt.MARK_START, fmt.MARK_STOP):
                    builder.mark(mark == fmt.MARK_START)
                continue
            if kind not in _STACK_KINDS:
                continue
            cn = names.get(word >> 32, unknown)
            line = (word >> 8) & 0xFFFFFF
            if kind == fmt.CALL:
                builder.call(thread, (cn.file, line or cn.line, cn.name))
            elif kind == fmt.RETURN or kind == fmt.UNWIND:
                builder.leave(thread, cn.file, cn.name)
            elif kind == fmt.LINE:
                builder.line(thread, (cn.file, line, cn.name))
            elif kind == fmt.STACK_FRAME or kind == fmt.SAMPLE_FRAME:
                part = parts.get(thread)
                if part is None:
                    part = parts[thread] = deque(maxlen=STACK_MAX)
                part.append((cn.file, line, cn.name))
            elif kind == fmt.STACK_END:
                frames = tuple(parts.pop(thread, ()))
                builder.whole_stack(thread, (CUT_FRAME, *frames) if line & 1 else frames)
            elif kind == fmt.SAMPLE_LEAF:
                frames = (*parts.pop(thread, ()), (cn.file, line, cn.name))
                last_sample[thread] = frames
                builder.sample(thread, frames)
            else:  # SAMPLE_SAME: the thread's previous sample
                builder.sample(thread, last_sample.get(thread, ()))
    found = builder.all()
    main = layout.thread
    if main is not None and main not in found:  # no record of it: nothing open, or not known
        found[main] = builder.stack(main)
    return found


_STACK_KINDS = frozenset(
    (
        fmt.CALL,
        fmt.RETURN,
        fmt.UNWIND,
        fmt.LINE,
        fmt.STACK_FRAME,
        fmt.STACK_END,
        fmt.SAMPLE_FRAME,
        fmt.SAMPLE_LEAF,
        fmt.SAMPLE_SAME,
    )
)
