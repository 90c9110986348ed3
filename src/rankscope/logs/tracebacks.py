"""Rebuild each rank's Python tracebacks from interleaved lines, then group identical ones.

Fast path: a chunk is scanned with ``bytes.find`` for ``Traceback (most recent call last)``;
from each header only that rank's following lines are visited (found by searching for the
rank's raw prefix), so the lines of the other 511 ranks cost nothing in Python. A traceback
cut by a chunk boundary simply continues in the next chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from rankscope.logs.prefixes import PLAIN, SourceLabels, split_line
from rankscope.logs.timestamps import TIMESTAMP, stamp_at

HEADER = b"Traceback (most recent call last)"
_CHAIN_MARKERS = (b"During handling of the above exception", b"The above exception was the direct cause")
_FRAME = re.compile(rb'File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.*))?')
_CARETS = re.compile(rb"^[\s^~]+$")
#: What an exception line looks like: ``ValueError: ...``, ``pkg.mod.Error:``, ``KeyboardInterrupt``.
_EXCEPTION_LINE = re.compile(rb"[A-Za-z_][\w.]*(?::(?:\s|$)|$)")
#: Stray lines (another stream of the same rank) skipped while waiting for the exception line.
MAX_STRAY = 50
MAX_FRAMES = 200
_GLOBAL_RANK = re.compile(rb"\[rank(\d+)\]:")
#: Blank or message-continuation lines tolerated while waiting to see if a chain follows.
_LOOKAHEAD = 3


@dataclass
class FrameLine:
    filename: str
    line: int
    function: str
    code: str = ""


@dataclass
class RankTraceback:
    """One traceback of one rank, as printed (the last exception of a chain)."""

    label: Optional[bytes]
    source: str
    order: int
    line_number: int
    frames: list[FrameLine] = field(default_factory=list)
    exception: str = ""
    chained: list[str] = field(default_factory=list)
    truncated: bool = False
    #: The last timestamp the rank wrote before (or on) its traceback header, if any.
    time: Optional[str] = None
    #: The global rank from torch's ``[rankN]:`` marker on the traceback lines, if present
    #: (the launcher prefix may carry a local rank, as torchrun's --role does).
    global_rank: Optional[int] = None

    @property
    def exception_type(self) -> str:
        head = self.exception.split(":", 1)[0].strip()
        return head or "<no exception line>"

    @property
    def message(self) -> str:
        parts = self.exception.split(":", 1)
        return parts[1].strip() if len(parts) == 2 else ""


@dataclass
class _Building:
    tb: RankTraceback
    raw_prefix: bytes
    state: str = "frames"  # frames | chain | after
    waited: int = 0


def _find_all(chunk: bytes, needle: bytes) -> list[int]:
    found = []
    pos = chunk.find(needle)
    while pos >= 0:
        found.append(pos)
        pos = chunk.find(needle, pos + len(needle))
    return found


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


class TracebackCollector:
    """Feed it chunks of whole lines (per source); read :attr:`tracebacks` after :meth:`finish`."""

    def __init__(self, sink: Optional[Callable[[RankTraceback], None]] = None) -> None:
        """Complete tracebacks go to ``sink``, or are kept in :attr:`tracebacks` without one."""
        self.tracebacks: list[RankTraceback] = []
        self._sink = sink if sink is not None else self.tracebacks.append
        self._labels = PLAIN
        self._allow_srun = False
        self._active: dict[bytes, _Building] = {}
        self._order = 0
        self._source = ""
        self._lines_before = 0
        self._consumed: set[int] = set()
        self._chunk_has_times = False
        self._cursor = (0, 0)

    def start_source(self, name: str, labels: SourceLabels = PLAIN) -> None:
        self.finish()
        self._source = name
        self._labels = labels
        self._allow_srun = labels.allow_srun
        self._lines_before = 0

    def feed(self, chunk: bytes) -> None:
        # Tracebacks still open from the previous chunk continue from its start.
        self._consumed = set()
        self._cursor = (0, 0)
        self._chunk_has_times = TIMESTAMP.search(chunk, 0, 1 << 16) is not None
        for building in list(self._active.values()):
            if building.state == "frames":
                self._follow(chunk, building, 0)
        # Headers and chain markers, in the order they appear: a marker turns a finished
        # traceback of its rank into a chain that the rank's next header continues.
        events = [(pos, True) for pos in _find_all(chunk, HEADER)]
        # Both chain markers contain "above exception": one scan finds either.
        events.extend((pos, False) for pos in _find_all(chunk, b"above exception"))
        events.sort()
        for pos, is_header in events:
            start = chunk.rfind(b"\n", 0, pos) + 1
            end = chunk.find(b"\n", pos)
            end = len(chunk) if end < 0 else end
            split = split_line(chunk[start:end], self._allow_srun)
            if not is_header:
                waiting = self._active.get(split.raw_prefix)
                if (
                    waiting is not None
                    and waiting.state == "after"
                    and split.text.strip().startswith(_CHAIN_MARKERS)
                ):
                    waiting.state = "chain"
            elif start not in self._consumed and split.text.startswith(HEADER):
                self._begin(chunk, start, end, split.raw_prefix, split.label)
        self._lines_before += chunk.count(b"\n")

    def continued_line(self) -> None:
        """The chunk just fed was a later piece of a cut line: not a line of its own."""
        self._lines_before -= 1

    def finish(self) -> None:
        for building in self._active.values():
            tb = building.tb
            tb.truncated = building.state == "frames" or (building.state == "chain" and not tb.exception)
            self._sink(tb)
        self._active.clear()

    # -- internals ---------------------------------------------------------------------

    def _begin(self, chunk: bytes, start: int, end: int, raw_prefix: bytes, label: Optional[bytes]) -> None:
        key = raw_prefix
        existing = self._active.get(key)
        if existing is not None:
            if existing.state == "chain":
                # The header is the next part of a chain this rank is already printing.
                if existing.tb.exception:
                    existing.tb.chained.append(existing.tb.exception)
                existing.tb.frames = []
                existing.tb.exception = ""
                existing.state = "frames"
                self._follow(chunk, existing, end + 1)
                return
            self._close(key, truncated=existing.state == "frames")
        self._order += 1
        line_number = self._line_number(chunk, start)
        tb = RankTraceback(
            label=self._labels.label(label),
            source=self._source,
            order=self._order,
            line_number=line_number,
        )
        tb.time = self._time_before(chunk, start, raw_prefix)
        marker = _GLOBAL_RANK.search(raw_prefix)
        tb.global_rank = int(marker.group(1)) if marker is not None else None
        building = _Building(tb, raw_prefix)
        self._active[key] = building
        self._follow(chunk, building, end + 1)

    def _time_before(self, chunk: bytes, start: int, raw_prefix: bytes) -> Optional[str]:
        """A timestamp on the header line or on one of the rank's few lines before it (this chunk,
        at most 64 KiB back; nothing is searched in chunks whose first 64 KiB have no timestamp)."""
        if not self._chunk_has_times:
            return None
        floor = max(0, start - (1 << 16))
        outer = raw_prefix[: raw_prefix.find(b"[rank", 1)] if raw_prefix.find(b"[rank", 1) > 0 else raw_prefix
        pos = start
        for _ in range(4):
            stamp = stamp_at(chunk, pos + len(outer)) if chunk.startswith(outer, pos) else None
            if stamp is not None:
                return stamp
            if pos == 0:
                return None
            if outer:
                found = chunk.rfind(b"\n" + outer, floor, pos - 1)
                pos = found + 1 if found >= 0 else (0 if floor == 0 and chunk.startswith(outer) else -1)
            else:
                pos = chunk.rfind(b"\n", 0, pos - 1) + 1
            if pos < 0:
                return None
        return None

    def _line_number(self, chunk: bytes, start: int) -> int:
        """1-based line number of ``start``; counts only from the last position asked about."""
        pos, lines = self._cursor
        if start < pos:
            pos, lines = 0, 0
        lines += chunk.count(b"\n", pos, start)
        self._cursor = (start, lines)
        return self._lines_before + lines + 1

    def _close(self, key: bytes, truncated: bool = False) -> None:
        building = self._active.pop(key)
        building.tb.truncated = truncated
        self._sink(building.tb)

    def _next_line(self, chunk: bytes, raw_prefix: bytes, start: int) -> tuple[int, int]:
        """Start and end of the next line at or after ``start`` that carries ``raw_prefix``."""
        if start >= len(chunk):
            return (-1, -1)
        if not raw_prefix:
            # No prefix: the next line without a recognised prefix.
            while start < len(chunk):
                end = chunk.find(b"\n", start)
                end = len(chunk) if end < 0 else end
                if (
                    self._labels.fixed_label is not None
                    or split_line(chunk[start:end], self._allow_srun).label is None
                ):
                    return (start, end)
                start = end + 1
            return (-1, -1)
        if start == 0 and chunk.startswith(raw_prefix):
            line_start = 0
        else:
            found = chunk.find(b"\n" + raw_prefix, start - 1 if start > 0 else 0)
            if found < 0:
                return (-1, -1)
            line_start = found + 1
        end = chunk.find(b"\n", line_start)
        return (line_start, len(chunk) if end < 0 else end)

    def _follow(self, chunk: bytes, building: _Building, start: int) -> None:
        key = building.raw_prefix
        while True:
            line_start, line_end = self._next_line(chunk, key, start)
            if line_start < 0:
                return
            start = line_end + 1
            text = split_line(chunk[line_start:line_end], self._allow_srun).text
            was_chain = building.state == "chain"
            if not self._step(building, text):
                self._close(key)
                return
            if was_chain and building.state == "frames":
                self._consumed.add(line_start)  # a chained header, not a new traceback
            if building.state == "after":
                # Complete unless a chain marker of this rank follows: feed() finds those
                # markers (and the rank's next header closes it), so no search ahead here.
                return

    def _step(self, building: _Building, text: bytes) -> bool:
        """Advance one line; False when the traceback is complete (the line is not part of it)."""
        tb = building.tb
        stripped = text.strip()
        if building.state == "after":
            if stripped.startswith(_CHAIN_MARKERS):
                building.state = "chain"
                return True
            if not stripped and building.waited < _LOOKAHEAD:
                building.waited += 1
                return True
            return False
        if not stripped:
            return True
        if stripped.startswith(HEADER):
            if building.state == "chain":
                if tb.exception:
                    tb.chained.append(tb.exception)
                tb.frames, tb.exception = [], ""
                building.state = "frames"
                return True
            return False  # a new traceback of the same rank; _begin opens it
        if building.state == "chain":
            return True
        if text[:1] in (b" ", b"\t"):
            frame = _FRAME.match(stripped)
            if frame is not None:
                if len(tb.frames) < MAX_FRAMES:
                    tb.frames.append(
                        FrameLine(
                            _decode(frame.group("file")),
                            int(frame.group("line")),
                            _decode(frame.group("func") or b"?"),
                        )
                    )
            elif tb.frames and not tb.frames[-1].code and not _CARETS.match(stripped):
                tb.frames[-1].code = _decode(stripped)
            return True
        if not _EXCEPTION_LINE.match(stripped) and building.waited < MAX_STRAY:
            building.waited += 1  # e.g. the rank's stdout print landing inside its stderr traceback
            return True
        tb.exception = _decode(stripped)
        building.state = "after"
        building.waited = 0
        return True
