"""Walk every source chunk by chunk, keeping count of what could not be read."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Protocol

from rankscope.errors import BadInputError, ErrorReport, NothingFoundError, RankscopeError
from rankscope.logs.heads import Head, sniff_head
from rankscope.logs.interleaved import InterleaveRepair
from rankscope.logs.ompi import OmpiJoiner, looks_tagged, looks_timestamped, without_timestamps
from rankscope.logs.prefixes import (
    Dialect,
    LineTally,
    SourceLabels,
    sniff_dialect,
    sniff_srun,
    split_line,
    tally_lines,
)
from rankscope.logs.redraws import split_redraws, split_window
from rankscope.logs.rich_boxes import RichBoxes
from rankscope.logs.sources import (
    CHUNK,
    MAX_LINE,
    BinaryInput,
    LineShape,
    LogSource,
    ReadStats,
    ReadSummary,
    Window,
    discover,
    read_windows,
    window_bytes,
)
from rankscope.logs.wrapped import Unwrapper, sniff_width

if TYPE_CHECKING:
    from rankscope.lifetime import StopSignals

#: How much of a source's start is looked at to tell srun --label or Open MPI output.
_SNIFF = 1 << 20


@dataclass(frozen=True)
class FailedDocument:
    """What a ``rankscope.logs.<verb>/1`` document holds when the verb ended in an error: the error,
    and what was read (None when reading never started)."""

    error: ErrorReport
    read: Optional[ReadSummary]


class LogsDocument(Protocol):
    """A ``rankscope.logs.*`` document: its class names the schema; ``read`` says what was read."""

    SCHEMA: ClassVar[str]
    read: ReadSummary
    error: Optional[ErrorReport]


def document_data(
    document: LogsDocument, reading: Reading, error: Optional[RankscopeError] = None
) -> dict[str, Any]:
    """A ``rankscope.logs.*`` document as JSON (its class names the schema), with what was read and
    the error the verb ends with, if any."""
    from rankscope.serial import dump_document

    document.read = reading.summary()
    document.error = ErrorReport.of(error) if error is not None else None
    return dump_document(document)


def failed_data(verb: str, error: RankscopeError, reading: Optional[Reading]) -> dict[str, Any]:
    """The ``rankscope.logs.<verb>/1`` document of a verb that ended in ``error`` before it printed
    one: the error, and what was read (null when reading never started)."""
    from rankscope.serial import dump_document

    failed = FailedDocument(ErrorReport.of(error), reading.summary() if reading is not None else None)
    return dump_document(failed, f"rankscope.logs.{verb}/1")


@contextlib.contextmanager
def stoppable_reading(
    inputs: Sequence[str], host_from_filename: bool, progress: Optional[Callable[[str], None]] = None
) -> Iterator[Reading]:
    """The inputs (files, directories, .gz, ``-``) to read, with SIGINT and SIGTERM recorded for as
    long as the block runs: a signal ends the reading at the next block, ``reading.stop.signum`` says
    which came, and the caller reports what was read."""
    from rankscope.lifetime import StopSignals

    with StopSignals() as stop:
        yield Reading(discover(inputs), host_from_filename, progress, stop=stop)


@dataclass
class OpenedSource:
    source: LogSource
    #: How this source's lines get their rank labels.
    labels: SourceLabels
    windows: Iterator[Window]
    shape: LineShape = field(default_factory=LineShape)
    #: The lines of the window just read, counted (:attr:`Reading.tally_lines`); None when not
    #: counted, or when the interleave repair rebuilt the window after counting.
    tally: Optional[LineTally] = None

    @property
    def continues(self) -> bool:
        """Is the window just read a later piece of a line longer than ``MAX_LINE``? Its text
        continues the line before it: join it back (no newline between), do not count it."""
        return self.shape.continuing

    @property
    def chunks(self) -> Iterator[bytes]:
        """Whole lines as byte strings (see :func:`read_windows` for the copy-free form)."""
        return _copied(self.windows)


@dataclass
class Reading:
    """Iterate :meth:`sources`; afterwards ``stats`` and ``skipped`` say what was read and what not.

    ``progress``, when given, is called after each block with ``reading job.log  412 / 1074 MB``
    (the caller decides how often to show it, and where).
    """

    inputs: Sequence[LogSource]
    host_from_filename: bool = False
    progress: Optional[Callable[[str], None]] = None
    #: Block size and line cut (tests make them small to reach every boundary).
    chunk_size: int = CHUNK
    max_line: int = MAX_LINE
    #: Split write-interleaved lines here (:mod:`interleaved`); ``logs grep`` does it itself, on
    #: the lines it prints only, which keeps it at ``grep -F`` speed.
    repair_interleaved: bool = True
    #: Count each window's lines and those without a rank prefix (``OpenedSource.tally``) before
    #: the interleave repair, which takes its count of lines that start with "[" from there.
    tally_lines: bool = False
    stats: ReadStats = field(default_factory=ReadStats)
    skipped: list[str] = field(default_factory=list)
    #: Ctrl-C / SIGTERM recorded (rankscope.lifetime.StopSignals): reading ends at the next block,
    #: and what was read is reported with a note.
    stop: Optional[StopSignals] = None
    #: Set when a stop signal ended reading: its name.
    interrupted: str = ""

    def _stopped(self) -> bool:
        if self.stop is None or not self.stop.signum or self.interrupted:
            return bool(self.interrupted)
        self.interrupted = self.stop.name
        return True

    def _stoppable(self, windows: Iterator[Window]) -> Iterator[Window]:
        for window in windows:
            yield window
            if self._stopped():
                return

    def sources(self) -> Iterator[OpenedSource]:
        total = self._total_mb() if self.progress is not None else ""
        for source in self.inputs:
            if self._stopped():
                self.skipped.append(f"{source.name}: not read (interrupted)")
                continue
            if source.not_read:
                self.skipped.append(f"{source.name}: {source.not_read}")
                continue
            # pieces of a long line keep its rank prefix (srun's form once the source is sniffed)
            shape = LineShape() if source.fixed_label is not None else LineShape(_prefix_reader(False))
            windows = read_windows(source, self.stats, self.chunk_size, shape, self.max_line)
            try:
                first = next(windows, None)
            except BinaryInput:
                self.skipped.append(f"{source.name}: binary data, not a text log")
                continue
            host = (
                source.path.name.split(".", 1)[0].encode()
                if self.host_from_filename and source.path
                else None
            )
            if first is None:
                yield OpenedSource(source, SourceLabels(source.fixed_label, False, host), iter(()))
                continue
            data, start, end = first
            head = RichBoxes().feed(split_redraws(data[start : min(end, start + _SNIFF)]))
            if source.named_label is not None and source.fixed_label is None and not _prefixed(head):
                # one rank's file named after it (rank3.log) whose lines carry no rank prefix
                source = replace(source, fixed_label=source.named_label)
                shape.prefix_of = LineShape.prefix_of
            stream: Iterator[Window] = _unboxed(split_window(w) for w in itertools.chain([first], windows))
            line_head = None if source.fixed_label is not None else sniff_head(head)
            if line_head is not None:
                head = line_head.strip(head)
                stream = _without_heads(stream, line_head)
            width = None if source.fixed_label is not None else sniff_width(head, _starts_line)
            if width is not None:  # a paste cut at a terminal's width: its lines joined again
                head = Unwrapper(width, _starts_line).feed(head)
                stream = _unwrapped(stream, Unwrapper(width, _starts_line), self.stats)
            allow_srun = source.fixed_label is None and sniff_srun(head)
            dialect = None if source.fixed_label is not None or allow_srun else sniff_dialect(head)
            if allow_srun or dialect is not None:
                shape.prefix_of = _prefix_reader(allow_srun, dialect)
            if source.fixed_label is None and looks_timestamped(head):
                head = without_timestamps(head)
                stream = (
                    (stamped, 0, len(stamped))
                    for stamped in (without_timestamps(window_bytes(w)) for w in stream)
                )
            tagged = source.fixed_label is None and looks_tagged(head)
            if tagged:
                stream = _joined(stream)
            labels = SourceLabels(source.fixed_label, allow_srun, host, dialect)
            opened = OpenedSource(source, labels, iter(()), shape)
            repair = None
            if source.fixed_label is None and not tagged and self.repair_interleaved:
                repair = InterleaveRepair(self.stats)
            if self.tally_lines:
                stream = _tallied(stream, opened, repair)
            elif repair is not None:
                stream = _repaired(stream, repair)
            if self.progress is not None:
                stream = self._tracked(stream, source.name, total)
            if self.stop is not None:
                stream = self._stoppable(stream)
            opened.windows = stream
            yield opened

    def _total_mb(self) -> str:
        """`` / 1074`` (MB) when every input's size is known (no stdin, no skipped files)."""
        sizes = [s.path.stat().st_size for s in self.inputs if s.path is not None and not s.not_read]
        total = sum(sizes)
        return f" / {total / 1e6:.0f}" if total and len(sizes) == len(self.inputs) else ""

    def _tracked(self, windows: Iterator[Window], name: str, total: str) -> Iterator[Window]:
        progress = self.progress
        assert progress is not None
        for window in windows:
            yield window
            read = self.stats.bytes_read + self.stats.nul_bytes
            progress(f"reading {name[-40:]}  {read / 1e6:.0f}{total} MB")

    def notes(self) -> list[str]:
        """What the reader of a result should know about how the input was read, one sentence each."""
        stats = self.stats
        notes = []
        if self.interrupted:
            read = (self.stats.bytes_read + self.stats.nul_bytes) / 1e6
            notes.append(
                f"interrupted by {self.interrupted} after {read:,.0f} MB: "
                "this result covers only what was read until then"
            )
        notes.extend(f"skipped {item}" for item in self.skipped)
        notes.extend(stats.notes)
        if stats.nul_bytes:
            notes.append(f"skipped {stats.nul_bytes:,} NUL bytes (a log truncated in place by copytruncate?)")
        if stats.cut_lines:
            notes.append(
                f"{stats.cut_lines} line(s) longer than {MAX_LINE >> 20} MiB were cut into pieces "
                f"({stats.cut_pieces} in all), each kept with its line's rank"
            )
        if stats.wrapped_lines:
            notes.append(
                f"joined {stats.wrapped_lines:,} line(s) cut at {stats.wrap_width} columns (a paste from a "
                "terminal) to the lines they continue; line numbers count the joined lines"
            )
        if stats.interleaved_lines:
            notes.append(
                f"repaired {stats.interleaved_lines:,} line(s) that held the text of several ranks "
                "(written at once without a lock): split at their embedded rank markers"
                + (
                    f", {stats.interleaved_newlines:,} empty line(s) of late newlines dropped"
                    if stats.interleaved_newlines
                    else ""
                )
            )
        return notes

    def summary(self) -> ReadSummary:
        stats = self.stats
        return ReadSummary(
            [s.name for s in self.inputs],
            stats.bytes_read,
            stats.cut_lines,
            list(self.skipped),
            stats.nul_bytes,
            stats.interleaved_lines,
            self.notes(),
        )

    def check_something_read(self) -> None:
        """Raise the right one-line error when no source had any text."""
        names = ", ".join(s.name for s in self.inputs[:3])
        if len(self.inputs) > 3:
            names += f" and {len(self.inputs) - 3} more"
        if self.stats.binary_sources and self.stats.binary_sources == len(self.inputs):
            raise BadInputError(
                f"{names}: binary data, not a text log", "give the console log or a torchrun --log-dir tree"
            )
        if self.stats.bytes_read == 0:
            if self.stats.notes:  # a .gz cut before its first line
                raise NothingFoundError(
                    f"{names}: no log lines ({'; '.join(self.stats.notes)})", "is the file complete?"
                )
            nuls = f"only NUL bytes ({self.stats.nul_bytes:,})" if self.stats.nul_bytes else "empty"
            raise NothingFoundError(f"{names}: {nuls}, no log lines", "is this the right file?")


def _without_heads(windows: Iterator[Window], head: Head) -> Iterator[Window]:
    """A container's, Kubernetes' or the journal's head removed from every line (see :mod:`heads`)."""
    for window in windows:
        data = head.strip(window_bytes(window))
        yield (data, 0, len(data))


def _starts_line(line: bytes) -> bool:
    """A physical line that begins a line of its own: a rank prefix or a traceback's header."""
    return split_line(line).label is not None or line.startswith(b"Traceback (most recent call last)")


def _unwrapped(windows: Iterator[Window], unwrapper: Unwrapper, stats: ReadStats) -> Iterator[Window]:
    """A terminal's hard wrap undone (see :mod:`wrapped`)."""
    stats.wrap_width = unwrapper.width
    for window in windows:
        data = unwrapper.feed(window_bytes(window))
        stats.wrapped_lines = unwrapper.joined
        yield (data, 0, len(data))
    rest = unwrapper.flush()
    if rest:
        yield (rest, 0, len(rest))


def _unboxed(windows: Iterator[Window]) -> Iterator[Window]:
    """Tracebacks that ``rich`` drew in a box, as Python prints them (see :mod:`rich_boxes`)."""
    boxes = RichBoxes()
    for window in windows:
        data, lo, hi = window
        if boxes.idle and data.find(b"\xe2", lo, hi) < 0:
            yield window
            continue
        read = boxes.feed(window_bytes(window))
        yield (read, 0, len(read))


def _joined(windows: Iterator[Window]) -> Iterator[Window]:
    """Open MPI --tag-output streams with one whole line per tag (see :mod:`ompi`)."""
    joiner = OmpiJoiner()
    for window in windows:
        data = joiner.feed(window_bytes(window))
        yield (data, 0, len(data))
    rest = joiner.flush()
    if rest:
        yield (rest, 0, len(rest))


def _prefixed(head: bytes) -> bool:
    """Whether any line of a source's head carries a rank prefix of a form rankscope reads."""
    if sniff_srun(head) or sniff_dialect(head) is not None:
        return True
    return any(split_line(line).raw_prefix for line in head.splitlines())


def _prefix_reader(allow_srun: bool, dialect: Optional[Dialect] = None) -> Callable[[bytes], bytes]:
    def prefix_of(line: bytes) -> bytes:
        return split_line(line, allow_srun, dialect).raw_prefix

    return prefix_of


def _copied(windows: Iterator[Window]) -> Iterator[bytes]:
    """Each window as bytes. A block read is let go only after the copy of the next one is made:
    glibc's allocator then reuses the memory, where otherwise it gives the two freed MiB back to
    the system and faults them in again for the next block (a page fault every 4 KiB: 4% of
    ``logs errors``' CPU time, in the kernel)."""
    read: Optional[Window] = None
    for window in windows:
        chunk = window_bytes(window)
        if chunk is not window[0]:
            read = window  # noqa: F841 - held until the next copy exists (see above)
        yield chunk


def _repaired(windows: Iterator[Window], repair: InterleaveRepair) -> Iterator[Window]:
    """Lines that hold several ranks' writes, split (see :mod:`interleaved`)."""
    for window in windows:
        yield repair.feed(window)


def _tallied(
    windows: Iterator[Window], opened: OpenedSource, repair: Optional[InterleaveRepair]
) -> Iterator[Window]:
    """Each window with its lines counted in ``opened.tally`` (then repaired, when ``repair``)."""
    for window in windows:
        data, lo, hi = window
        tally = tally_lines(data, opened.labels, lo, hi)
        if repair is not None:
            repaired = repair.feed(window, tally.bracket_labelled)
            opened.tally = tally if repaired is window else None
            yield repaired
        else:
            opened.tally = tally
            yield window
