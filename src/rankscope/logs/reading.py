"""Walk every source chunk by chunk, keeping count of what could not be read."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Callable, Optional

from rankscope.errors import BadInputError, NothingFoundError
from rankscope.logs.ompi import OmpiJoiner, looks_tagged
from rankscope.logs.prefixes import SourceLabels, sniff_srun
from rankscope.logs.sources import (
    BinaryInput,
    LogSource,
    ReadStats,
    ReadSummary,
    Window,
    read_windows,
    window_bytes,
)

#: How much of a source's start is looked at to tell srun --label or Open MPI output.
_SNIFF = 1 << 20


@dataclass
class OpenedSource:
    source: LogSource
    #: How this source's lines get their rank labels.
    labels: SourceLabels
    windows: Iterator[Window]

    @property
    def chunks(self) -> Iterator[bytes]:
        """Whole lines as byte strings (see :func:`read_windows` for the copy-free form)."""
        return (window_bytes(window) for window in self.windows)


@dataclass
class Reading:
    """Iterate :meth:`sources`; afterwards ``stats`` and ``skipped`` say what was read and what not.

    ``progress``, when given, is called after each block with ``reading job.log  412 / 1074 MB``
    (the caller decides how often to show it, and where).
    """

    inputs: Sequence[LogSource]
    host_from_filename: bool = False
    progress: Optional[Callable[[str], None]] = None
    stats: ReadStats = field(default_factory=ReadStats)
    skipped: list[str] = field(default_factory=list)

    def sources(self) -> Iterator[OpenedSource]:
        total = self._total_mb() if self.progress is not None else ""
        for source in self.inputs:
            if source.not_read:
                self.skipped.append(f"{source.name}: {source.not_read}")
                continue
            windows = read_windows(source, self.stats)
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
            head = data[start : min(end, start + _SNIFF)]
            allow_srun = source.fixed_label is None and sniff_srun(head)
            stream: Iterator[Window] = itertools.chain([first], windows)
            if source.fixed_label is None and looks_tagged(head):
                stream = _joined(stream)
            if self.progress is not None:
                stream = self._tracked(stream, source.name, total)
            yield OpenedSource(source, SourceLabels(source.fixed_label, allow_srun, host), stream)

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
            progress(f"reading {name[-40:]}  {self.stats.bytes_read / 1e6:.0f}{total} MB")

    def summary(self) -> ReadSummary:
        return ReadSummary(
            [s.name for s in self.inputs], self.stats.bytes_read, self.stats.cut_lines, list(self.skipped)
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
            raise NothingFoundError(f"{names}: empty, no log lines", "is this the right file?")


def _joined(windows: Iterator[Window]) -> Iterator[Window]:
    """Open MPI --tag-output streams with one whole line per tag (see :mod:`ompi`)."""
    joiner = OmpiJoiner()
    for window in windows:
        data = joiner.feed(window_bytes(window))
        yield (data, 0, len(data))
    rest = joiner.flush()
    if rest:
        yield (rest, 0, len(rest))
