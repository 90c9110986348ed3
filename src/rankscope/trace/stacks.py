"""Each thread's open calls, rebuilt from the records (pure: events in, stacks out).

Calls push, returns and unwinds pop, and a whole stack (the writer's lap records, format.py) or a
stack sample replaces what is known. Where the records begin decides what is known of the calls
opened before them: at the start of the trace nothing was open, and after a lap's whole stacks
every thread's stack is known; anywhere else (a ring of format version 1 that has wrapped, a lap
whose whole stacks were cut short) the outer calls are lost and the stack is marked partial.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

from rankscope.trace import format as fmt
from rankscope.trace.decode import CUT_FRAME, Decoder, Event, Layout, Source, forward

#: The sampler keeps the innermost 64 frames (tracer.SAMPLE_DEPTH): a sample that long may be cut.
SAMPLE_DEPTH = 64
#: Open calls kept per thread (a runaway recursion keeps its innermost calls, marked partial).
DEPTH_MAX = 1024

Frame = tuple[str, int, str]


@dataclass(frozen=True)
class OpenCall:
    file: str
    #: the function's first line (calls), or the line it was at (a sample, --lines)
    line: int
    name: str

    @property
    def location(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line} {self.name}" if self.file else self.name


@dataclass(frozen=True)
class OpenStack:
    thread: int
    #: outermost first, innermost last
    calls: tuple[OpenCall, ...]
    #: the outer calls could not be rebuilt: the ring overwrote them and no whole stack followed
    partial: bool


class StackBuilder:
    """Feed events oldest first; :meth:`stack` says what each thread has open after them."""

    def __init__(self) -> None:
        self.stacks: dict[int, list[Frame]] = {}
        self.whole: dict[int, bool] = {}
        #: a thread first seen from here on started with nothing open
        self.known = False
        self._lap: Optional[set[int]] = None

    def _of(self, thread: int) -> list[Frame]:
        stack = self.stacks.get(thread)
        if stack is None:
            stack = self.stacks[thread] = []
            self.whole[thread] = self.known
        return stack

    def _replace(self, thread: int, frames: Iterable[Frame], whole: bool) -> None:
        stack = [f for f in frames if f != CUT_FRAME]
        self.stacks[thread] = stack[-DEPTH_MAX:]
        self.whole[thread] = whole and len(stack) <= DEPTH_MAX

    def feed(self, event: Event) -> None:
        kind, thread = event.kind, event.thread
        if kind == "call":
            stack = self._of(thread)
            stack.append((event.file, event.line, event.name))
            if len(stack) > DEPTH_MAX:
                del stack[0]
                self.whole[thread] = False
        elif kind in ("return", "unwind"):
            stack = self._of(thread)
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][2] == event.name and stack[i][0] == event.file:
                    del stack[i:]  # calls above it whose returns were not seen end with it
                    break
            # not found: a call opened before the records begin (the stack is partial already)
        elif kind == "line":
            stack = self._of(thread)
            if stack and stack[-1][2] == event.name and stack[-1][0] == event.file:
                stack[-1] = (event.file, event.line, event.name)
        elif kind == "stack":
            self._replace(thread, event.stack, not event.stack or event.stack[0] != CUT_FRAME)
            if self._lap is not None:
                self._lap.add(thread)
        elif kind == "sample" and event.stack:
            self._replace(thread, event.stack, len(event.stack) < SAMPLE_DEPTH)
        elif kind == "lap":
            self._lap = set()
        elif kind == "lap end" and self._lap is not None:
            for other in self.stacks:  # every traced thread was written: the others had ended
                if other not in self._lap:
                    self.stacks[other], self.whole[other] = [], True
            self.known, self._lap = True, None
        elif kind == "start":
            self.stacks.clear()
            self.whole.clear()
            self.known = True
        elif kind == "stop":
            self.stacks.clear()
            self.whole.clear()
            self.known = False

    def stack(self, thread: int) -> OpenStack:
        frames = self.stacks.get(thread)
        if frames is None:
            return OpenStack(thread, (), not self.known)
        return OpenStack(thread, tuple(OpenCall(*f) for f in frames), not self.whole.get(thread, False))

    def all(self) -> dict[int, OpenStack]:
        return {thread: self.stack(thread) for thread in self.stacks}


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
    """Every thread's open calls at the end of the file (a chunk of records at a time)."""
    builder = StackBuilder()
    decoder = Decoder(layout)
    for table in forward(layout, source, stack_ranges(layout, newest)):
        for event in decoder.events(table):
            builder.feed(event)
    found = builder.all()
    thread = layout.thread
    if thread is not None and thread not in found:  # no record of it: nothing open, or not known
        found[thread] = builder.stack(thread)
    return found
