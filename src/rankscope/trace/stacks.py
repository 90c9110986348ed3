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
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # decode reads the records and feeds them here: only its event type, no cycle
    from rankscope.trace.decode import Event

#: The sampler keeps the innermost 64 frames (tracer.SAMPLE_DEPTH): a sample that long may be cut.
SAMPLE_DEPTH = 64
#: Open calls kept per thread (a runaway recursion keeps its innermost calls, marked partial).
DEPTH_MAX = 1024

Frame = tuple[str, int, str]
#: The outermost frame of a whole stack whose outer calls the writer left out.
CUT_FRAME: Frame = ("", 0, "...")


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
