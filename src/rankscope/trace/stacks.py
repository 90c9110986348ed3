"""Each thread's open calls, rebuilt from the records (pure: events in, stacks out).

Calls push, returns and unwinds pop, and a whole stack (the writer's lap records, format.py) or a
stack sample replaces what is known. Where the records begin decides what is known of the calls
opened before them: at the start of the trace nothing was open, and after a lap's whole stacks
every thread's stack is known; anywhere else (a ring of format version 1 that has wrapped, a lap
whose whole stacks were cut short) the outer calls are lost and the stack is marked partial.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

from rankscope.trace import format as fmt
from rankscope.trace.decode import CUT_FRAME, STACK_MAX, CodeName, Event, Layout, Source, forward

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
        #: the last mark was the trace's stop: nothing is open any more
        self.stopped = False
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

    def call(self, thread: int, frame: Frame) -> None:
        self.stopped = False
        stack = self._of(thread)
        stack.append(frame)
        if len(stack) > DEPTH_MAX:
            del stack[0]
            self.whole[thread] = False

    def leave(self, thread: int, file: str, name: str) -> None:
        """A return or unwind: the call it ends, and calls above it whose returns were not seen."""
        stack = self._of(thread)
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][2] == name and stack[i][0] == file:
                del stack[i:]
                return
        # not found: a call opened before the records begin (the stack is partial already)

    def line(self, thread: int, frame: Frame) -> None:
        stack = self._of(thread)
        if stack and stack[-1][2] == frame[2] and stack[-1][0] == frame[0]:
            stack[-1] = frame

    def whole_stack(self, thread: int, frames: tuple[Frame, ...]) -> None:
        """One thread's whole stack from a lap (CUT_FRAME first where the writer left calls out)."""
        self._replace(thread, frames, not frames or frames[0] != CUT_FRAME)
        if self._lap is not None:
            self._lap.add(thread)

    def sample(self, thread: int, frames: tuple[Frame, ...]) -> None:
        if frames:
            self._replace(thread, frames, len(frames) < SAMPLE_DEPTH)

    def lap(self) -> None:
        self._lap = set()

    def lap_end(self) -> None:
        if self._lap is None:
            return
        for other in self.stacks:  # every traced thread was written: the others had ended
            if other not in self._lap:
                self.stacks[other], self.whole[other] = [], True
        self.known, self._lap = True, None

    def mark(self, started: bool) -> None:
        """The start of the trace (nothing open) or its stop (nothing known after it)."""
        self.stacks.clear()
        self.whole.clear()
        self.known = started
        self.stopped = not started

    def feed(self, event: Event) -> None:
        kind, thread = event.kind, event.thread
        if kind == "call":
            self.call(thread, (event.file, event.line, event.name))
        elif kind in ("return", "unwind"):
            self.leave(thread, event.file, event.name)
        elif kind == "line":
            self.line(thread, (event.file, event.line, event.name))
        elif kind == "stack":
            self.whole_stack(thread, event.stack)
        elif kind == "sample":
            self.sample(thread, event.stack)
        elif kind == "lap":
            self.lap()
        elif kind == "lap end":
            self.lap_end()
        elif kind in ("start", "stop"):
            self.mark(kind == "start")

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
