"""Undo a terminal's hard wrap in a pasted log (pure).

A log copied from a terminal window (or from a pager, or a screenshot's text) arrives cut into
physical lines of the window's width: ``... [PG ID 0 PG GUID 0(default_pg) Rank 6] ProcessGroupNCCL'``
then ``s watchdog got stuck for 480 seconds ...`` on a line with no rank prefix. Every later step
reads lines, so the rank, the message and the exception are lost. Such a paste is told apart by its
shape: the longest lines are exactly the width (one in 20 may be a column or two longer: a tab or
a wide character counted apart, a terminal that cut one line a column later), and many lines are that long (a log as written has lines
of every length and some longer than any repeated one). Then a line of exactly that width
is joined to the next one, except where the next one starts a line of its own (a rank prefix, or
the same first characters as the line it would continue) or the line ends in the padding some
terminals copy (two spaces or more up to the width). The joined lines are counted in the report's
notes; line numbers then count logical lines.

Widths are counted in characters (a terminal's columns, for text without wide characters), never
below :data:`MIN_WIDTH`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Optional

#: Narrower than this is no terminal a log is read in.
MIN_WIDTH = 60
#: How many lines of exactly the width, at least, and what share of the lines of MIN_WIDTH or more.
MIN_WRAPPED = 3
MIN_SHARE = 0.25
#: Lines longer than the width a paste may still have: a line whose tab or wide character counts
#: apart from its columns, a terminal that cut one line a column later (one in 20 of the long lines,
#: at least this many; none longer than the width by more than ``LONGER_BY``).
MAX_LONGER = 1
LONGER_BY = 2
#: Lines looked at to tell the width.
SNIFF_LINES = 4000


def _width(line: bytes) -> int:
    return len(line) if line.isascii() else len(line.decode("utf-8", "replace"))


def sniff_width(head: bytes, starts_line: Callable[[bytes], bool]) -> Optional[int]:
    """The width a pasted log was hard-wrapped at, or None when it was not. ``starts_line``: whether a
    physical line begins a line of its own; most lines of the width must be followed by one that does
    not (the same message printed by several ranks gives lines of one length too, each a whole line)."""
    lines = [line.rstrip(b"\r") for line in head.split(b"\n", SNIFF_LINES)[:SNIFF_LINES]]
    lengths = [_width(line) for line in lines]
    long_lines = [n for n in lengths if n >= MIN_WIDTH]
    if not long_lines:
        return None
    width, count = Counter(long_lines).most_common(1)[0]
    longer = sum(1 for n in long_lines if n > width)
    if max(long_lines) > width + LONGER_BY:
        return None
    if (
        longer > max(MAX_LONGER, len(long_lines) // 20)
        or count < MIN_WRAPPED
        or count < MIN_SHARE * len(long_lines)
    ):
        return None
    # a line of its own starts as the line before did (the same prefix: `worker-1: `, `[2025-`, `[rank`)
    pairs = [(lines[i], lines[i + 1]) for i, n in enumerate(lengths[:-1]) if n == width and lines[i + 1]]
    continued = sum(
        1
        for line, after in pairs
        if after[:4] != line[:4] and not starts_line(after) and not _same_head(line, after)
    )
    return width if continued * 2 > len(pairs) else None


#: A line's own head of the form srun --label and pdsh give it (``3: ``, ``worker-1: ``).
_HEAD = re.compile(rb"\s*[\w.@-]{1,64}: ")


def _same_head(line: bytes, after: bytes) -> bool:
    """Both lines begin with such a head (srun's ``0: `` then ``1: ``): the second is a line of its own."""
    return _HEAD.match(line) is not None and _HEAD.match(after) is not None


class Unwrapper:
    """Feed chunks of whole physical lines; get back chunks of whole logical lines."""

    def __init__(self, width: int, starts_line: Callable[[bytes], bool]) -> None:
        self.width = width
        #: Whether a physical line starts a line of its own (a rank prefix): never joined to the one before.
        self.starts_line = starts_line
        self.joined = 0
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        lines = chunk.split(b"\n")
        tail = lines.pop()  # after the last newline: empty for a chunk of whole lines
        out: list[bytes] = []
        for line in lines:
            self._take(line, out)
        if tail:
            self._take(tail, out)
        return b"".join(part + b"\n" for part in out)

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest + b"\n" if rest else b""

    def _take(self, line: bytes, out: list[bytes]) -> None:
        body = line.rstrip(b"\r")
        if self._pending:
            if self.starts_line(body) or body[:4] == self._pending[:4]:
                out.append(self._pending)
            else:
                body = self._pending + body
                self.joined += 1
            self._pending = b""
        if _width(line.rstrip(b"\r")) == self.width and not line.endswith(b"  "):
            self._pending = body
        else:
            out.append(body.rstrip(b" ") if line.endswith(b"  ") else body)
