"""Walk every source chunk by chunk, keeping count of what could not be read."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Optional

from rankscope.errors import BadInputError, NothingFoundError
from rankscope.logs.ompi import OmpiJoiner, looks_tagged
from rankscope.logs.prefixes import sniff_srun
from rankscope.logs.progress import Progress
from rankscope.logs.sources import BinaryInput, LogSource, ReadStats, Window, read_windows, window_bytes


@dataclass
class OpenedSource:
    source: LogSource
    allow_srun: bool
    windows: Iterator[Window]
    #: With ``host_from_filename``: the file's name up to its first dot, given to bare rank labels.
    host: Optional[bytes] = None

    @property
    def chunks(self) -> Iterator[bytes]:
        """Whole lines as byte strings (see :func:`read_windows` for the copy-free form)."""
        return (window_bytes(window) for window in self.windows)


@dataclass
class Reading:
    """Iterate :meth:`sources`; afterwards ``stats`` and ``skipped`` say what was read and what not."""

    inputs: Sequence[LogSource]
    host_from_filename: bool = False
    #: Show reading progress on a terminal (off for verbs that stream their output there).
    progress: bool = True
    stats: ReadStats = field(default_factory=ReadStats)
    skipped: list[str] = field(default_factory=list)

    def sources(self) -> Iterator[OpenedSource]:
        sizes = [s.path.stat().st_size for s in self.inputs if s.path is not None and not s.not_read]
        progress = Progress(sum(sizes) if len(sizes) == len(self.inputs) else None, enabled=self.progress)
        try:
            yield from self._sources(progress)
        finally:
            progress.close()

    def _sources(self, progress: Progress) -> Iterator[OpenedSource]:
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
                yield OpenedSource(source, False, iter(()), host)
                continue
            data, start, end = first
            allow_srun = source.fixed_label is None and sniff_srun(data[start : min(end, start + (1 << 20))])
            stream: Iterator[Window] = itertools.chain([first], windows)
            if source.fixed_label is None and looks_tagged(data[start : min(end, start + (1 << 20))]):
                stream = _joined(stream)
            tracked = progress.track(stream, source.name, self.stats)
            yield OpenedSource(source, allow_srun, tracked, host)

    def check_something_read(self) -> None:
        """Raise the right one-line error when no source had any text."""
        names = ", ".join(s.name for s in self.inputs[:3])
        if len(self.inputs) > 3:
            names += f" and {len(self.inputs) - 3} more"
        binary = [s for s in self.skipped if s.endswith("binary data, not a text log")]
        if self.stats.bytes_read == 0 or (binary and len(binary) == len(self.inputs)):
            if binary and len(binary) == len(self.inputs):
                raise BadInputError(
                    f"{names}: binary data, not a text log",
                    "give the console log or a torchrun --log-dir tree",
                )
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
