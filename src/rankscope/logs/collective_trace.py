"""The Python stack of a collective that torch's NCCL watchdog timed out.

torch >= 2.6, with its flight recorder on (``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0), prints after the
``Watchdog caught collective operation timeout`` line the stack the collective was called from, as
one C++ log message whose later lines carry no ``[rankN]:`` marker (a launcher that prefixes every
line, ``torchrun --tee``, ``srun --label``, puts its own prefix on each)::

    [rank0]:[E1126 18:14:34.069 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective:
    #0 all_reduce from /venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:3068
    #1 wrapper from /venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py:83
    #2 log_global_loss from /job/train.py:9
    #3 main from /job/train.py:21

The header ends in a space; innermost frame first; a blank line ends it. Without the flight recorder torch says ``Stack trace of
the failed collective not found, ...`` instead (no colon after ``collective``): nothing to read.

:class:`CollectiveTraces` is fed the blocks of a source only where a header was seen or a stack is
still open from the block before (a stack may continue in the next block); it keeps, per rank, the
user's own frame of its first stack (:func:`rankscope.logs.roles.user_frame`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from rankscope.logs.prefixes import TORCH_RANK
from rankscope.logs.roles import user_frame
from rankscope.logs.tracebacks import FrameLine

HEADER = b"Stack trace of the failed collective:"
_FRAME = re.compile(rb"#\d+ (\S.*?) from (.+):(\d+)")
#: Frames kept per stack (torch's own are a handful; a deep model adds a few dozen).
MAX_FRAMES = 200
#: Bytes of other ranks' lines searched, in all, for the next line of one stack.
REACH = 256 << 10


@dataclass
class _Stack:
    """One rank's stack while it is read: its launcher prefix (the header's, without torch's
    marker), the frames so far, the bytes still searched."""

    who: Optional[str]
    outer: bytes
    order: int
    frames: list[FrameLine] = field(default_factory=list)
    reach: int = REACH
    done: bool = False


@dataclass(frozen=True)
class Place:
    """The user's frame of a rank's failed collective, and where its stack was printed."""

    frame: FrameLine
    order: int

    def words(self) -> str:
        """``log_global_loss (train.py:9)``."""
        return f"{self.frame.function} ({os.path.basename(self.frame.filename)}:{self.frame.line})"


@dataclass
class CollectiveTraces:
    """Feed it the blocks of one source after another; read :attr:`places` after :meth:`end`."""

    #: Rank (as the watchdog finding names it) -> the user's frame of its first stack; None where
    #: every frame of it was torch's or another package's.
    places: dict[Optional[str], Optional[Place]] = field(default_factory=dict)
    _open: list[_Stack] = field(default_factory=list)

    @property
    def reading(self) -> bool:
        """A stack goes on in the next block."""
        return bool(self._open)

    def feed(
        self,
        chunk: bytes,
        head: Callable[[bytes], tuple[Optional[str], bytes]],
        order: Callable[[int], int],
    ) -> None:
        """Read a block of whole lines: the stacks open from the block before, then each header's.
        ``head``: a line's rank (as the watchdog lines name it) and raw prefix; ``order``: a line
        start's position in the input."""
        for stack in self._open:
            self._read(chunk, stack, 0)
        pos = chunk.find(HEADER)
        while pos >= 0:
            start = chunk.rfind(b"\n", 0, pos) + 1
            end = chunk.find(b"\n", pos)
            end = len(chunk) if end < 0 else end
            who, raw = head(chunk[start:end])
            marker = TORCH_RANK.search(raw)
            outer = raw if marker is None else raw[: marker.start()] + raw[marker.end() :]
            stack = _Stack(who, outer, order(start))
            self._open.append(stack)
            self._read(chunk, stack, end + 1)
            pos = chunk.find(HEADER, end)
        for stack in [s for s in self._open if s.done]:
            self._close(stack)

    def end(self) -> None:
        """The source ended: a stack still open was cut there (its frames so far count)."""
        for stack in list(self._open):
            self._close(stack)

    def _close(self, stack: _Stack) -> None:
        self._open.remove(stack)
        if stack.who in self.places and self.places[stack.who] is not None:
            return  # the rank's first stack with a frame of its own is the one
        # innermost first: the first frame of the user's own code is the innermost one
        frame = user_frame(reversed(stack.frames))
        self.places[stack.who] = Place(frame, stack.order) if frame is not None else None

    @staticmethod
    def _read(chunk: bytes, stack: _Stack, pos: int) -> None:
        """The stack's lines from ``pos`` (a line start): with a launcher prefix, the next lines
        that carry it (other ranks' lines between are skipped); without one, the lines right after.
        A line of it that is no frame (the blank line torch ends it with) ends it."""
        outer = stack.outer
        while pos < len(chunk) and not stack.done:
            if outer and not chunk.startswith(outer, pos):
                stop = min(len(chunk), pos + stack.reach)
                found = chunk.find(b"\n" + outer, pos, stop)
                if found < 0:
                    stack.reach -= stop - pos
                    stack.done = stack.reach <= 0
                    return
                stack.reach -= found + 1 - pos
                pos = found + 1
            end = chunk.find(b"\n", pos)
            end = len(chunk) if end < 0 else end
            text = chunk[pos + len(outer) : end].strip()
            marker = TORCH_RANK.match(text)
            if marker is not None:
                text = text[marker.end() :]
            found_frame = _FRAME.fullmatch(text)
            if found_frame is None:
                stack.done = True
                return
            if len(stack.frames) < MAX_FRAMES:
                stack.frames.append(
                    FrameLine(
                        found_frame.group(2).decode("utf-8", "replace"),
                        int(found_frame.group(3)),
                        found_frame.group(1).decode("utf-8", "replace"),
                    )
                )
            pos = end + 1
