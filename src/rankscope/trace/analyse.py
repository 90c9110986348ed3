"""Pure analysis of decoded traces: where each process stopped (grouped), grep counts, call depth."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.folding import RankSet
from rankscope.trace.decode import Event, TraceData
from rankscope.trace.stacks import OpenCall, OpenStack


@dataclass(frozen=True)
class FileTail:
    path: str
    host: str
    rank: Optional[int]
    pid: int
    #: where the process is: its innermost open call of the user's own code (and the innermost
    #: call, where that is a library's), else the last event of the thread that started tracing
    where: str
    events: tuple[Event, ...]
    #: the open calls of the thread that started tracing, outermost first
    stack: tuple[OpenCall, ...] = ()
    #: the outer calls are missing (the ring overwrote them and no whole stack followed)
    partial: bool = False
    #: that thread's last event (a detail beneath the stack)
    last: Optional[Event] = None


@dataclass(frozen=True)
class TailGroup:
    #: ``[0-6]`` (ranks folded) or the file names of processes without a rank
    ranks: str
    where: str
    files: tuple[FileTail, ...]
    #: the open calls these processes share, outermost first
    stack: tuple[OpenCall, ...] = ()
    partial: bool = False


@dataclass(frozen=True)
class Unreadable:
    path: str
    reason: str


@dataclass(frozen=True)
class TailReport:
    SCHEMA: ClassVar[str] = "rankscope.trace.tail/1"

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
    SCHEMA: ClassVar[str] = "rankscope.trace.grep/1"

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


def last_event(trace: TraceData) -> Optional[Event]:
    """The last event of the starting thread (any thread's where that is not known)."""
    thread = main_thread(trace)
    events = trace.events if trace.last_seen is None else [trace.last_seen, *trace.events]
    for event in reversed(events):
        if event.kind == "start" or (event.kind == "stop" and thread is not None and event.thread != thread):
            continue
        if thread is None or event.thread == thread:
            return event
    return None


def where(trace: TraceData) -> str:
    """The last location of the starting thread (a call, line or sample), else of any thread."""
    event = last_event(trace)
    if event is None:
        return "no events"
    return "trace stopped" if event.kind == "stop" else f"{event.location} ({event.kind})"


def own_code(file: str) -> bool:
    """A file of the user's own code, as far as its path tells (not site-packages, not the
    standard library, not generated)."""
    return bool(file) and not (
        file.startswith("<")
        or "/site-packages/" in file
        or "/dist-packages/" in file
        or _STDLIB.search(file) is not None
    )


_STDLIB = re.compile(r"/lib(?:64)?/python\d+\.\d+/")


def stack_where(calls: tuple[OpenCall, ...]) -> str:
    """``train.py:12 wait_for_others``, and ``> distributed_c10d.py:3870 barrier`` when the innermost
    open call is a library's (``--include``): the user's own frame is never hidden."""
    innermost = calls[-1]
    own = next((c for c in reversed(calls) if own_code(c.file)), None)
    if own is None or own is innermost:
        return innermost.location
    return f"{own.location} > {innermost.location}"


def file_tail(trace: TraceData, n: int) -> FileTail:
    thread = main_thread(trace)
    found: Optional[OpenStack] = trace.stacks.get(thread) if thread is not None else None
    last = last_event(trace)
    calls = found.calls if found is not None else ()
    partial = found.partial if found is not None else last is not None
    if last is not None and last.kind == "stop":
        calls, partial = (), False
    shown = stack_where(calls) if calls else where(trace)
    events = tuple(trace.events[-n:] if n else ())
    return FileTail(trace.path, trace.host, trace.rank, trace.pid, shown, events, calls, partial, last)


def tail(traces: list[TraceData], n: int, unreadable: tuple[Unreadable, ...] = ()) -> TailReport:
    """The last ``n`` events of every file; files with the same open calls grouped."""
    by_stack: dict[tuple[str, tuple[OpenCall, ...], bool], list[FileTail]] = {}
    for trace in traces:
        item = file_tail(trace, n)
        by_stack.setdefault((item.where, item.stack, item.partial), []).append(item)
    groups = []
    for (location, calls, partial), items in by_stack.items():
        items.sort(key=lambda f: (f.rank if f.rank is not None else 1 << 62, f.host, f.pid))
        groups.append(TailGroup(fold_members(items), location, tuple(items), calls, partial))
    groups.sort(key=lambda g: (-len(g.files), _first_rank(g)))
    return TailReport(tuple(groups), unreadable)


def _first_rank(group: TailGroup) -> int:
    rank = group.files[0].rank
    return rank if rank is not None else 1 << 62


def fold_members(items: list[FileTail]) -> str:
    ranks = [f.rank for f in items if f.rank is not None]
    label = f"[{str(RankSet.of(ranks))}]" if ranks else ""
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
        elif event.kind == "stack":
            level[event.thread] = len(event.stack)
        elif event.kind in ("return", "unwind"):
            d = max(d - 1, 0)
            level[event.thread] = d
        yield event, d
