"""Decode a trace file's bytes into events (pure: bytes in, :class:`TraceData` out).

A file that is not a rankscope trace, is of a newer version, or is cut short raises
:class:`~rankscope.errors.BadInputError` with one line naming the file and what is wrong (exit 8).
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from typing import Any, Optional

from rankscope.errors import BadInputError
from rankscope.trace import format as fmt


@dataclass(frozen=True)
class CodeName:
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

    @property
    def host(self) -> str:
        return str(self.meta.get("host") or "?")

    @property
    def rank(self) -> Optional[int]:
        rank = self.meta.get("rank")
        return rank if isinstance(rank, int) else None

    @property
    def pid(self) -> int:
        pid = self.meta.get("pid")
        return pid if isinstance(pid, int) else 0


def _bad(path: str, what: str) -> BadInputError:
    return BadInputError(
        f"{path}: not a readable rankscope trace ({what})", "pass a trace-* file written by rankscope trace"
    )


def parse_names(region: bytes) -> dict[int, CodeName]:
    names: dict[int, CodeName] = {}
    for line in region.decode("utf-8", "replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 4 or not parts[0].isdigit():
            continue  # a line cut by a crash while it was written
        try:
            names[int(parts[0])] = CodeName(parts[1], int(parts[2]), parts[3])
        except ValueError:
            continue
    return names


def decode(path: str, data: bytes, last: Optional[int] = None) -> TraceData:
    """Every event of one trace file, oldest first; with ``last``, only the newest records that
    hold the last ``last`` events of the thread that started tracing (``trace tail``: a full ring
    is 262,144 records, and a job has many files)."""
    if len(data) < fmt.HEADER_SIZE:
        raise _bad(path, f"{len(data)} bytes, shorter than its {fmt.HEADER_SIZE}-byte header")
    magic, version, flags, words, capacity, names_bytes, names_used, wraps, meta_len = fmt.HEADER.unpack_from(
        data
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
    ring = bool(flags & fmt.FLAG_RING)
    start = fmt.HEADER_SIZE + names_bytes
    if ring and len(data) < start + capacity * fmt.RECORD_BYTES:
        raise _bad(path, f"truncated: {len(data)} bytes of {start + capacity * fmt.RECORD_BYTES}")
    if not ring and len(data) < start:
        raise _bad(path, f"truncated: {len(data)} bytes, its names region ends at {start}")
    try:
        meta = json.loads(data[fmt.META_OFFSET : fmt.META_OFFSET + meta_len])
    except ValueError:
        raise _bad(path, "damaged metadata") from None
    if not isinstance(meta, dict):
        raise _bad(path, "damaged metadata")
    names = parse_names(data[fmt.HEADER_SIZE : fmt.HEADER_SIZE + names_used])
    end = (
        start + capacity * fmt.RECORD_BYTES
        if ring
        else start + (len(data) - start) // fmt.RECORD_BYTES * fmt.RECORD_BYTES
    )
    table: array[int] = array("Q")
    table.frombytes(data[start:end])
    if table.itemsize != 8:  # pragma: no cover - every Linux platform
        raise _bad(path, "unsupported platform word size")
    count = len(table) // 3
    order = _ring_order(table, count) if ring else [i for i in range(count) if table[3 * i]]
    trace = TraceData(path, version, ring, flags, capacity, wraps, meta, records=len(order))
    if last is not None:
        order = _tail_of(table, order, meta.get("thread"), last)
    to_ns = _converter(data, flags)
    trace.events = _events(table, order, names, int(meta.get("clock_ns") or 0), to_ns)
    return trace


def _converter(data: bytes, flags: int) -> Optional[tuple[int, int, float]]:
    """(ticks0, ns0, ns per tick) when records carry CPU counter ticks, else None (they are ns)."""
    if not flags & fmt.FLAG_TICKS:
        return None
    ticks0, ns0, ticks1, ns1 = fmt.CALIBRATION.unpack_from(data, fmt.CALIBRATION_OFFSET)
    if ticks1 <= ticks0:
        return (ticks0, ns0, 0.0)
    return (ticks0, ns0, (ns1 - ns0) / (ticks1 - ticks0))


def _tail_of(table: array[int], order: list[int], thread: Any, last: int) -> list[int]:
    """The suffix of ``order`` holding ``last`` events of ``thread`` (sample frames do not count)."""
    wanted = max(last, 1)
    seen = 0
    for back in range(len(order) - 1, -1, -1):
        i = order[back]
        if table[3 * i + 1] & 0xFF != fmt.SAMPLE_FRAME and (thread is None or table[3 * i + 2] == thread):
            seen += 1
            if seen >= wanted:
                return order[back:]
    return order


def _ring_order(table: array[int], count: int) -> list[int]:
    """Slot indexes oldest first: the newest record has the largest time, the oldest follows it."""
    times = table[0::3]  # C-speed slices and max: a full ring is 262,144 records
    if not count or not max(times):
        return []
    newest = times.index(max(times))
    return [i for i in (*range(newest + 1, count), *range(newest + 1)) if times[i]]


def _events(
    table: array[int],
    order: list[int],
    names: dict[int, CodeName],
    clock0: int,
    to_ns: Optional[tuple[int, int, float]] = None,
) -> list[Event]:
    unknown = CodeName("", 0, "?")
    out: list[Event] = []
    stacks: dict[int, list[tuple[str, int, str]]] = {}
    last_stack: dict[int, tuple[tuple[str, int, str], ...]] = {}
    for i in order:
        t_ns, word, tid = table[3 * i], table[3 * i + 1], table[3 * i + 2]
        kind = word & 0xFF
        code_id = word >> 32
        line = (word >> 8) & 0xFFFFFF
        if to_ns is not None:
            t_ns = int(to_ns[1] + (t_ns - to_ns[0]) * to_ns[2])
        t = (t_ns - clock0) / 1e9 if clock0 else 0.0
        if kind == fmt.MARK:
            out.append(
                Event(
                    t,
                    "start" if line == 1 else "stop",
                    tid,
                    "",
                    0,
                    "trace " + ("start" if line == 1 else "stop"),
                )
            )
            continue
        cn = names.get(code_id, unknown)
        file = cn.file
        if kind == fmt.SAMPLE_FRAME:
            stacks.setdefault(tid, []).append((file, line, cn.name))
            continue
        if kind == fmt.SAMPLE_LEAF:
            stack = (*stacks.pop(tid, []), (file, line, cn.name))
            last_stack[tid] = stack
            out.append(Event(t, "sample", tid, file, line, cn.name, stack))
            continue
        if kind == fmt.SAMPLE_SAME:
            stack = last_stack.get(tid, ())
            f, ln, nm = stack[-1] if stack else ("", 0, "(same stack as before: overwritten)")
            out.append(Event(t, "sample", tid, f, ln, nm, stack))
            continue
        name = fmt.KIND_NAMES.get(kind)
        if name is None:
            continue  # a torn record
        if kind in (fmt.CALL, fmt.RETURN, fmt.UNWIND) and not line:
            line = cn.line
        out.append(Event(t, name, tid, file, line, cn.name))
    return out
