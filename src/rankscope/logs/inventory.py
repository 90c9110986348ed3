"""`logs ranks`: which ranks appear in a log, how many lines each, first and last timestamps."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Optional

from rankscope.errors import ErrorReport
from rankscope.logs.labels import host_and_rank, label_order
from rankscope.logs.prefixes import PLAIN, SourceLabels, qualify, split_line
from rankscope.logs.sources import ReadSummary
from rankscope.logs.timestamps import TIMESTAMP, stamp_at
from rankscope.serial import OMIT_NONE, SKIP

if TYPE_CHECKING:
    from rankscope.logs.reading import Reading

#: The bracket prefix at the start of every line but the first (a literal "\n" keeps the scan fast).
_HEAD = re.compile(rb"\n(\[[^\]\n]{1,200}\](?:<std(?:out|err|diag)>)?:?)")
#: Most distinct heads whose parse is remembered (a bound on memory, not on correctness).
_HEAD_CACHE = 1 << 16
#: A head that is a bare number in brackets ("[80746]", MPICH's "[0]"): read line by line.
_NUMBER_HEAD = re.compile(rb"\[\d+\]")
_FIRST_HEAD = re.compile(rb"(\[[^\]\n]{1,200}\](?:<std(?:out|err|diag)>)?:?)")


def _bare_lines(chunk: bytes, head: bytes) -> int:
    """How many lines are exactly ``head`` (overlapping "\\n[3]:\\n[3]:\\n" counts twice)."""
    count = 1 if chunk.startswith(head + b"\n") else 0
    needle = b"\n" + head + b"\n"
    pos = chunk.find(needle)
    while pos >= 0:
        count += 1
        pos = chunk.find(needle, pos + len(needle) - 1)
    return count


#: Bytes of a block read backwards line by line for its heads' last timestamps; heads not settled
#: by then are searched for one by one.
_TAIL_SCAN = 256 << 10
#: A head's last lines tried for a timestamp (its last lines may be a traceback, without one).
_STAMP_TRIES = 16


def last_stamps(chunk: bytes, heads: list[bytes]) -> dict[bytes, Optional[str]]:
    """For each head (each a :data:`_HEAD` of ``chunk``): the timestamp of the last of the lines
    that start with it, of its last 16, that has one (None without).

    The block's tail is read backwards once for all heads (a rank of a busy job wrote its last line
    somewhere in the last few hundred lines), not searched once per head from the end.
    """
    tries = dict.fromkeys(heads, 0)
    found: dict[bytes, Optional[str]] = dict.fromkeys(heads)
    candidates: dict[bytes, tuple[bytes, ...]] = {}
    end = len(chunk)
    # a newline (or the block's start): the lines before it are whole, for the searches below
    floor = max(chunk.rfind(b"\n", 0, max(0, end - _TAIL_SCAN)), 0)
    while tries and end > floor:
        start = max(chunk.rfind(b"\n", floor, max(floor, end - (32 << 10))), floor)
        for match in reversed(list(_HEAD.finditer(chunk, start, end))):
            line_head = match.group(1)
            names = candidates.get(line_head)
            if names is None:
                names = candidates[line_head] = _heads_of(line_head)
            for head in names:
                count = tries.get(head)
                if count is None:
                    continue
                stamp = stamp_at(chunk, match.start() + 1 + len(head))
                if stamp is not None or count + 1 == _STAMP_TRIES:
                    found[head] = stamp
                    del tries[head]
                else:
                    tries[head] = count + 1
        end = start
    for head, count in tries.items():  # not settled in the tail: one search each, on from there
        found[head] = _last_stamp(chunk, head, end, _STAMP_TRIES - count)
    return found


def _heads_of(line_head: bytes) -> tuple[bytes, ...]:
    """The heads a line that starts with ``line_head`` starts with: itself, and without its ":" or
    Open MPI's stream tag (``[1,2]`` and ``[1,2]<stdout>`` for ``[1,2]<stdout>:``)."""
    bracket = line_head[: line_head.index(b"]") + 1]
    tagged = (
        line_head[: line_head.index(b">") + 1] if line_head.startswith(b"<std", len(bracket)) else bracket
    )
    return tuple(dict.fromkeys((line_head, tagged, bracket)))


def _last_stamp(chunk: bytes, head: bytes, last: int, tries: int) -> Optional[str]:
    """The timestamp of the last of ``head``'s lines before ``last`` (of ``tries`` at most) that has one."""
    needle = b"\n" + head
    for _ in range(tries):
        last = chunk.rfind(needle, 0, last)
        if last < 0:
            if not chunk.startswith(head):
                return None
            return stamp_at(chunk, len(head))  # the block's first line
        stamp = stamp_at(chunk, last + 1 + len(head))
        if stamp is not None:
            return stamp
    return None


@dataclass
class RankLines:
    """One rank's lines: a row of ``logs ranks``."""

    label: str
    host: Optional[str]
    rank: Optional[int]
    lines: int = 0
    first_time: Optional[str] = None
    last_time: Optional[str] = None
    #: The label as read (bytes), for sorting.
    raw: bytes = field(default=b"", metadata=SKIP, repr=False)

    @classmethod
    def of(cls, label: bytes) -> RankLines:
        """A new row: the label read as host and rank once, when the rank is first seen."""
        return cls(label.decode("utf-8", "replace"), *host_and_rank(label), raw=label)


@dataclass
class RanksDocument:
    """``rankscope.logs.ranks``: which ranks wrote how many lines, and when."""

    SCHEMA: ClassVar[str] = "rankscope.logs.ranks/1"

    lines: int
    unprefixed_lines: int
    ranks: list[RankLines]
    read: ReadSummary = field(default_factory=ReadSummary)
    #: The error the verb ends with, when it printed what it found and still failed.
    error: Optional[ErrorReport] = field(default=None, metadata=OMIT_NONE)


@dataclass
class Inventory:
    ranks: dict[bytes, RankLines] = field(default_factory=dict)
    unprefixed: int = 0
    lines: int = 0
    _head_labels: dict[bytes, Optional[bytes]] = field(default_factory=dict)
    _host: Optional[bytes] = None

    def feed(self, chunk: bytes, labels: SourceLabels = PLAIN) -> None:
        self._host = labels.host
        if labels.fixed_label is None and not labels.allow_srun and labels.dialect is None:
            self._feed_bracketed(chunk)
            return
        self._feed_lines(chunk, labels)

    def _feed_bracketed(self, chunk: bytes) -> None:
        """Count bracket prefixes with one C-level regex scan; parse each distinct one once.

        Gives the same counts as :meth:`_feed_lines` (a test checks it), at about 20x the speed.
        """
        total = chunk.count(b"\n")
        self.lines += total
        heads: Counter[bytes] = Counter(_HEAD.findall(chunk))
        first = _FIRST_HEAD.match(chunk)
        if first is not None:
            heads[first.group(1)] += 1
        if any(_NUMBER_HEAD.fullmatch(head) for head in heads):
            # "[80746] [rank0]:": a number before torch's marker; split_line reads the marker
            self.lines -= total
            self._feed_lines(chunk, PLAIN if self._host is None else SourceLabels(host=self._host))
            return
        prefixed = 0
        rows: list[tuple[RankLines, bytes]] = []
        for head, count in heads.items():
            label = self._head_labels.get(head, b"?")
            if label == b"?":
                if len(self._head_labels) >= _HEAD_CACHE:  # lines led by timestamps: many heads
                    self._head_labels.clear()
                label = self._head_labels[head] = split_line(head + b"x").label
            label = qualify(label, self._host)
            if label is None:
                continue
            if head.endswith(b":") and head[1:2].isdigit() and b"," not in head:
                # "[3]:" alone on a line is torchrun's failure summary, not rank 3 (see prefixes.py)
                count -= _bare_lines(chunk, head)
                if count <= 0:
                    continue
            prefixed += count
            entry = self.ranks.get(label)
            if entry is None:
                entry = self.ranks[label] = RankLines.of(label)
            entry.lines += count
            rows.append((entry, head))
        last = last_stamps(chunk, [head for _entry, head in rows])
        for entry, head in rows:
            if entry.first_time is None:
                start = 0 if chunk.startswith(head) else chunk.find(b"\n" + head) + 1
                entry.first_time = stamp_at(chunk, start + len(head))
            stamp = last[head]
            if stamp is not None:
                entry.last_time = stamp
                if entry.first_time is None:
                    entry.first_time = stamp
        self.unprefixed += total - prefixed

    def _feed_lines(self, chunk: bytes, labels: SourceLabels) -> None:
        ranks = self.ranks
        count = unprefixed = 0
        for label, text in labels.lines(chunk):
            count += 1
            if label is None:
                unprefixed += 1
                continue
            entry = ranks.get(label)
            if entry is None:
                entry = ranks[label] = RankLines.of(label)
            entry.lines += 1
            if b"-" in text[:40]:
                stamp = TIMESTAMP.search(text, 0, 40)
                if stamp is not None:
                    value = stamp.group(1).decode()
                    if entry.first_time is None:
                        entry.first_time = value
                    entry.last_time = value
        self.lines += count
        self.unprefixed += unprefixed

    def read(self, reading: Reading) -> Inventory:
        """Every line of ``reading`` counted (the pieces of a cut line as one line)."""
        for opened in reading.sources():
            for chunk in opened.chunks:
                self.feed(chunk, opened.labels)
                if opened.continues:
                    self.continued_line(chunk, opened.labels)
        return self

    def continued_line(self, chunk: bytes, labels: SourceLabels = PLAIN) -> None:
        """``chunk`` (just fed) was a later piece of a cut line: count it with the line it continues."""
        self.lines -= 1
        label = labels.label(split_line(chunk[:4096], labels.allow_srun, labels.dialect).label)
        entry = None if label is None else self.ranks.get(label)
        if entry is not None:
            entry.lines -= 1
        elif label is None:
            self.unprefixed -= 1

    def rows(self) -> list[RankLines]:
        """Every rank's row, by host then rank."""
        return sorted(self.ranks.values(), key=lambda row: label_order(row.raw))

    def document(self) -> RanksDocument:
        return RanksDocument(self.lines, self.unprefixed, self.rows())
