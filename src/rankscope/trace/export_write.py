"""``trace export``: every trace file under a directory into one Chrome trace-event JSON file.

Events are written as they are decoded (each file read twice, a chunk at a time: export.py), so
memory does not grow with the rings. The output is written to a new private file (0600, like
the rings: it holds the program's function names and paths) next to the target, and renamed
over it when complete, never through a symbolic link.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar, Optional, Protocol

from rankscope.errors import BadInputError, RankscopeError
from rankscope.serial import dump_document
from rankscope.trace.analyse import Unreadable
from rankscope.trace.collect import open_trace, trace_files
from rankscope.trace.decode import Layout, TraceData, iter_events
from rankscope.trace.export import FileExport, Skew, clock_skew, opened_before


class EventSink(Protocol):
    """What also takes the events as they are written (``--html``: the timeline builder)."""

    def rank(self, pid: int, label: str) -> None: ...

    def clock(self, pid: int, words: str) -> None: ...

    def feed(self, event: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class ExportResult:
    out: str
    files: int
    events: int
    #: calls still open at the end of the rings (drawn as slices that did not end)
    open_calls: int
    skew: tuple[Skew, ...]
    unreadable: tuple[Unreadable, ...]


@dataclass(frozen=True)
class ClockSkew:
    """One host's clock against the reference host's (:class:`Skew` in the export's words)."""

    host: str
    vs: str
    ms: float
    collectives: int


@dataclass(frozen=True)
class ExportInfo:
    """The exported file's ``otherData``: rankscope's document inside Chrome's trace format."""

    SCHEMA: ClassVar[str] = "rankscope.trace.export/1"

    clock: str
    clock_skew: tuple[ClockSkew, ...]
    unreadable: tuple[Unreadable, ...]


def _layouts(target: str) -> tuple[list[tuple[Path, Layout]], list[Unreadable]]:
    good, bad = [], []
    for path in trace_files(target):
        try:
            with open_trace(path) as opened:
                good.append((path, opened.layout))
        except RankscopeError as exc:
            bad.append(Unreadable(os.fspath(path), _reason(path, exc)))
    return good, bad


def _reason(path: Path, exc: RankscopeError) -> str:
    named = f"{os.fspath(path)}: "
    return exc.message[len(named) :] if exc.message.startswith(named) else exc.message


def _wall_ns(layout: Layout) -> Optional[int]:
    value = layout.meta.get("wall_ns")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _order(item: tuple[Path, Layout]) -> tuple[int, str, str]:
    meta = item[1].meta
    rank = meta.get("rank")
    number = rank if isinstance(rank, int) and not isinstance(rank, bool) else 1 << 62
    return (number, str(meta.get("host")), os.fspath(item[0]))


def export(target: str, out: str, timeline: Optional[EventSink] = None) -> ExportResult:
    """Write the trace-event JSON of every trace file under ``target`` to ``out``; every event
    written is fed to ``timeline`` too, when given (``--html``)."""
    found, bad = _layouts(target)
    if not found:
        first = bad[0]
        raise BadInputError(
            f"{first.path}: {first.reason}"
            + (f" (and {len(bad) - 1} more unreadable files)" if len(bad) > 1 else ""),
            "pass trace-* files written by rankscope trace",
        )
    found.sort(key=_order)
    walls = [w for w in (_wall_ns(layout) for _, layout in found) if w is not None]
    base = min(walls) if walls else 0
    exports: list[FileExport] = []
    count = 0
    with _private_output(out) as handle:
        handle.write('{"traceEvents": [\n')
        first_event = True

        def emit(events: Iterator[dict[str, Any]]) -> int:
            nonlocal first_event
            n = 0
            for event in events:
                if timeline is not None:
                    timeline.feed(event)
                handle.write(("" if first_event else ",\n") + json.dumps(event, separators=(",", ":")))
                first_event = False
                n += 1
            return n

        for pid, (path, _) in enumerate(found, start=1):
            try:
                with open_trace(path) as opened:
                    layout = opened.layout
                    head, events = iter_events(layout, opened.source)
                    before = opened_before(events)
                    wall = _wall_ns(layout)
                    clock = layout.meta.get("clock_ns")
                    offset = (wall - base) / 1000 if wall is not None and isinstance(clock, int) else 0.0
                    item = FileExport(head, pid, offset, before)
                    if timeline is not None:
                        timeline.rank(pid, row_label(head))
                    count += emit(item.events(iter_events(layout, opened.source)[1]))
                    exports.append(item)
            except RankscopeError as exc:  # cut short while read: what was written stays
                bad.append(Unreadable(os.fspath(path), _reason(path, exc)))
        skew = clock_skew(exports)
        count += emit(_skew_labels(exports, skew, timeline))
        other = ExportInfo(
            "wall clock of each file's host, microseconds since the earliest file's start",
            tuple(ClockSkew(s.host, s.reference, s.ms, s.samples) for s in skew),
            tuple(bad),
        )
        handle.write(
            '\n],\n"displayTimeUnit": "ms",\n"otherData": ' + json.dumps(dump_document(other)) + "}\n"
        )
    open_calls = sum(sum(item.still_open.values()) for item in exports)
    return ExportResult(out, len(exports), count, open_calls, tuple(skew), tuple(bad))


def row_label(trace: TraceData) -> str:
    """``host:rank`` (``host:pid N`` for a process with no rank)."""
    return f"{trace.host}:{trace.rank if trace.rank is not None else f'pid {trace.pid}'}"


def _skew_labels(
    exports: list[FileExport], skew: list[Skew], timeline: Optional[EventSink]
) -> Iterator[dict[str, Any]]:
    """Each process of a host with a measured skew says it (Perfetto shows process labels)."""
    by_host = {s.host: s for s in skew}
    for item in exports:
        found = by_host.get(item.trace.host)
        if found is not None:
            label = f"clock {found.ms:+.3f} ms vs {found.reference} (from {found.samples} collective returns)"
            if timeline is not None:
                timeline.clock(item.pid, label)
            yield {"name": "process_labels", "ph": "M", "pid": item.pid, "args": {"labels": label}}


class _private_output:
    """A new 0600 file beside ``out``, renamed over it on success, removed on failure."""

    def __init__(self, out: str) -> None:
        self.out = os.path.abspath(out)
        directory = os.path.dirname(self.out)
        if not os.path.isdir(directory):
            raise BadInputError(f"{out}: no such directory {directory}", "create it, or name another --out")
        self.temp = os.path.join(directory, f".{os.path.basename(self.out)}.{os.getpid()}.partial")
        self.handle: Optional[IO[str]] = None

    def __enter__(self) -> IO[str]:
        try:
            fd = os.open(
                self.temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
        except OSError as exc:
            raise BadInputError(f"{self.out}: {exc.strerror or exc}", "name a writable --out") from None
        self.handle = os.fdopen(fd, "w", encoding="utf-8", buffering=1 << 20)
        return self.handle

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        assert self.handle is not None
        try:
            self.handle.close()
            if kind is None:
                os.replace(self.temp, self.out)  # replaces a link itself, never writes through it
        except OSError as exc:
            _remove(self.temp)
            raise BadInputError(f"{self.out}: {exc.strerror or exc}", "name a writable --out") from None
        if kind is not None:
            _remove(self.temp)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
