"""`logs grep`: the ranks asked for, the global ranks torch's markers give them, and the scans that
find their lines (as bytes for a terminal, or as :class:`GrepLine` rows of the ``rankscope.logs.grep/1``
document, one at a time: memory does not grow with the matches)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, ClassVar, Optional, TextIO

from rankscope.errors import BadInputError, ErrorReport, RankscopeError
from rankscope.logs.demux import GlobalRanks, RankGrep
from rankscope.logs.labels import host_and_rank, label_text
from rankscope.logs.reading import Reading
from rankscope.logs.sources import ReadSummary
from rankscope.serial import OMIT_NONE


@dataclass(frozen=True)
class GrepHead:
    """What the document says before its lines: the ranks asked, how each bare number matched."""

    SCHEMA: ClassVar[str] = "rankscope.logs.grep/1"

    ranks: list[str]
    matched: list[str]


@dataclass(frozen=True)
class GrepTail:
    """What the document says after its lines: how many were found, the error it ends with (if
    nothing could be read), and what was read."""

    found: int
    error: Optional[ErrorReport] = field(metadata=OMIT_NONE)
    read: ReadSummary


@dataclass(frozen=True)
class GrepLine:
    """One line found: its label, rank, file, line number and text (``continued``: the rest of the
    line of the row before, cut at the reader's line limit)."""

    label: Optional[str]
    host: Optional[str]
    rank: Optional[int]
    global_rank: Optional[int]
    file: str
    line: int
    continued: bool
    text: str


def rank_labels(ranks: tuple[str, ...]) -> list[bytes]:
    """``--rank`` values as labels: host:rank, a bare rank, or a folded set (node[1-2]:[0-3])."""
    labels: list[bytes] = []
    for item in ranks:
        from ClusterShell.NodeSet import NodeSet, NodeSetParseError

        try:
            expanded = list(NodeSet(item)) if "[" in item else [item]
        except NodeSetParseError as exc:
            raise BadInputError(
                f"cannot read rank {item!r}: {exc}", "use host:rank, rank, or node[1-2]:[0-3]"
            ) from None
        labels.extend(label.encode() for label in expanded)
    return labels


def bare_numbers(wanted: list[bytes]) -> list[int]:
    return [int(label) for label in wanted if label.isdigit()]


def global_ranks(numbers: list[int], reading: Reading) -> dict[int, list[bytes]]:
    """The labels torch's [rankN]: markers show each of ``numbers`` under (read in a pass of its own:
    a rank's ordinary lines come long before its marked traceback)."""
    markers = GlobalRanks(numbers)
    reading.repair_interleaved = False
    for opened in reading.sources():
        for chunk in opened.chunks:
            markers.feed(chunk, opened.labels)
    return {number: sorted(labels) for number, labels in sorted(markers.labels.items())}


def how_matched(number: int, labels: list[bytes]) -> str:
    shown = ", ".join(f"[{label.decode('utf-8', 'replace')}]" for label in labels)
    return f"rank {number} = {shown} (global rank from torch's [rank{number}]: markers)"


def write_lines(finder: RankGrep, reading: Reading, out: BinaryIO) -> int:
    """Write the lines ``finder`` finds to ``out`` as they come; how many lines were found."""
    found = 0
    line_open = False  # the last line written has no newline yet: a piece of a cut line may follow
    reading.repair_interleaved = False  # the finder splits the lines it prints itself
    for opened in reading.sources():
        for data, lo, hi in opened.windows:
            lines = list(finder.lines(data, opened.labels, lo, hi, opened.continues and line_open))
            if lines:
                if opened.continues and line_open:  # the rest of the line just written
                    found -= 1
                elif line_open:
                    out.write(b"\n")
                found += len(lines)
                out.write(b"\n".join(lines))
                line_open = True
    if line_open:
        out.write(b"\n")
    out.flush()
    reading.stats.interleaved_lines += finder.interleaved_lines
    return found


def found_lines(finder: RankGrep, reading: Reading, global_of: dict[bytes, int]) -> Iterator[GrepLine]:
    """Every line ``finder`` finds, with its file and line number, as it is found."""
    reading.repair_interleaved = False
    for opened in reading.sources():
        name = opened.source.name
        lines_before = 0
        for data, lo, hi in opened.windows:
            continues = opened.continues
            base = lines_before - (1 if continues else 0)
            cursor, newlines = lo, 0
            for start, label, text in finder.found(data, opened.labels, lo, hi, continues):
                newlines += data.count(b"\n", cursor, start)
                cursor = start
                host, rank = host_and_rank(label)
                yield GrepLine(
                    label=label_text(label),
                    host=host,
                    rank=rank,
                    global_rank=global_of.get(label),
                    file=name,
                    line=base + newlines + 1,
                    continued=continues,
                    text=text.decode("utf-8", "replace"),
                )
            lines_before += data.count(b"\n", lo, hi) - (1 if continues else 0)
    reading.stats.interleaved_lines += finder.interleaved_lines


class GrepDocument:
    """The ``rankscope.logs.grep/1`` document written as it is found: the ranks asked and how each
    matched, then the ``lines`` array one row at a time, then ``found`` and what was read."""

    def __init__(self, out: TextIO, ranks: list[str], ways: list[str]) -> None:
        self.out = out
        self.ranks, self.ways = ranks, ways
        #: Lines found (a cut line's later pieces are rows of their own, not lines).
        self.found = 0

    def write_lines(self, rows: Iterable[GrepLine]) -> None:
        """The head, then every row as it comes (call once the inputs are found: a missing path
        ends in the error document alone)."""
        from rankscope.serial import dump_document, to_json

        head = dump_document(GrepHead(self.ranks, self.ways))
        self.out.write(json.dumps(head)[:-1] + ', "lines": [')
        for written, row in enumerate(rows):
            self.out.write(("\n" if not written else "\n, ") + json.dumps(to_json(row)))
            self.found += 0 if row.continued else 1

    def close(self, reading: Reading) -> None:
        """Close the document with ``found`` and what was read; when nothing could be read, with the
        error too (the document is already open), and the error is raised."""
        from rankscope.serial import to_json

        failed: Optional[ErrorReport] = None
        try:
            reading.check_something_read()
        except RankscopeError as error:
            failed = ErrorReport.of(error)
            raise
        finally:
            tail = to_json(GrepTail(self.found, failed, reading.summary()))
            self.out.write("\n], " + json.dumps(tail)[1:] + "\n")
            self.out.flush()
