"""Pure analysis of decoded traces: where each process stopped (grouped), grep counts, call depth."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Optional

from rankscope.folding import fold_ints
from rankscope.trace.decode import Event, TraceData

#: The documents of `trace tail`, `trace grep` and `trace show` (:class:`TailReport`,
#: :class:`GrepReport`, and the decoded head with its events).
TAIL_SCHEMA = "rankscope.trace.tail/1"
GREP_SCHEMA = "rankscope.trace.grep/1"
SHOW_SCHEMA = "rankscope.trace.show/1"


@dataclass(frozen=True)
class FileTail:
    path: str
    host: str
    rank: Optional[int]
    pid: int
    #: where the process was last seen: the last event of the thread that started tracing
    where: str
    events: tuple[Event, ...]


@dataclass(frozen=True)
class TailGroup:
    #: ``[0-6]`` (ranks folded) or the file names of processes without a rank
    ranks: str
    where: str
    files: tuple[FileTail, ...]


@dataclass(frozen=True)
class Unreadable:
    path: str
    reason: str


@dataclass(frozen=True)
class TailReport:
    groups: tuple[TailGroup, ...]
    unreadable: tuple[Unreadable, ...] = ()


@dataclass(frozen=True)
class GrepFile:
    path: str
    host: str
    rank: Optional[int]
    count: int
    matches: tuple[Event, ...] = field(default=())


@dataclass(frozen=True)
class GrepReport:
    pattern: str
    files: tuple[GrepFile, ...]
    unreadable: tuple[Unreadable, ...] = ()

    @property
    def total(self) -> int:
        return sum(f.count for f in self.files)


def main_thread(trace: TraceData) -> Optional[int]:
    """The thread that started tracing (recorded in the header), usually the program's main thread."""
    thread = trace.meta.get("thread")
    if isinstance(thread, int):
        return thread
    for event in trace.events:
        if event.kind == "start":
            return event.thread
    return None


def where(trace: TraceData) -> str:
    """The last location of the starting thread (a call, line or sample), else of any thread."""
    thread = main_thread(trace)
    events = trace.events if trace.last_seen is None else [trace.last_seen, *trace.events]
    for event in reversed(events):
        if event.kind in ("start", "stop"):
            if event.kind == "stop" and (thread is None or event.thread == thread):
                return "trace stopped"
            continue
        if thread is None or event.thread == thread:
            return f"{event.location} ({event.kind})"
    return "no events"


def tail(traces: list[TraceData], n: int, unreadable: tuple[Unreadable, ...] = ()) -> TailReport:
    """The last ``n`` events of every file; files whose last location is the same grouped."""
    by_where: dict[str, list[FileTail]] = {}
    for trace in traces:
        item = FileTail(
            trace.path, trace.host, trace.rank, trace.pid, where(trace), tuple(trace.events[-n:] if n else ())
        )
        by_where.setdefault(item.where, []).append(item)
    groups = []
    for location, items in by_where.items():
        items.sort(key=lambda f: (f.rank if f.rank is not None else 1 << 62, f.host, f.pid))
        groups.append(TailGroup(fold_members(items), location, tuple(items)))
    groups.sort(key=lambda g: (-len(g.files), _first_rank(g)))
    return TailReport(tuple(groups), unreadable)


def _first_rank(group: TailGroup) -> int:
    rank = group.files[0].rank
    return rank if rank is not None else 1 << 62


def fold_members(items: list[FileTail]) -> str:
    ranks = [f.rank for f in items if f.rank is not None]
    label = f"[{fold_ints(ranks)}]" if ranks else ""
    others = [f"{f.host}:pid{f.pid}" for f in items if f.rank is None]
    return " ".join(x for x in (label, *others) if x)


def event_text(event: Event) -> str:
    """The line of an event that ``grep`` matches and ``show`` prints (after time and thread)."""
    return f"{event.kind} {event.location}"


def grep_file(regex: re.Pattern[str], trace: TraceData, events: Iterable[Event], keep: int) -> GrepFile:
    """The events of one file whose text matches ``regex``, counted as they stream by; the last
    ``keep`` kept (memory does not grow with the file)."""
    count = 0
    kept: deque[Event] = deque(maxlen=keep)
    for event in events:
        if regex.search(event_text(event)):
            count += 1
            if keep:
                kept.append(event)
    return GrepFile(trace.path, trace.host, trace.rank, count, tuple(kept))


def depths(events: Iterable[Event]) -> Iterator[tuple[Event, int]]:
    """Every event with its call depth within its thread (calls in, returns out), for indentation."""
    level: dict[int, int] = {}
    for event in events:
        d = level.get(event.thread, 0)
        if event.kind == "call":
            level[event.thread] = d + 1
        elif event.kind in ("return", "unwind"):
            d = max(d - 1, 0)
            level[event.thread] = d
        yield event, d
