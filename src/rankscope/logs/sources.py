"""Find and stream log inputs: files, directories, ``-`` (stdin), ``.gz``, torchrun ``--log-dir`` trees.

Everything is read as bytes in large chunks that end on a line boundary, so nothing is ever
loaded whole and invalid UTF-8 never raises. Lines longer than ``MAX_LINE`` are cut (and
counted) so that a file without newlines cannot exhaust memory.
"""

from __future__ import annotations

import gzip
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Optional

from rankscope.errors import BadInputError, NothingFoundError

CHUNK = 1 << 20
MAX_LINE = 4 << 20
#: File names read when a directory is given (plus torchrun's stdout.log/stderr.log).
LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".log.gz", ".out.gz", ".err.gz", ".txt.gz", ".gz")
#: torchrun --log-dir layout: <dir>/<run_id>_<rand>/attempt_<n>/<local_rank>/{stdout,stderr}.log
_LOG_DIR_FILE = re.compile(r"attempt_\d+/(\d+)/(?:stdout|stderr)\.log$")


@dataclass(frozen=True)
class LogSource:
    """One input stream. ``fixed_label`` is set when the path names the rank (torchrun log dirs)."""

    name: str
    path: Optional[Path]
    fixed_label: Optional[bytes] = None
    #: Set for files found but not read as logs (torchrun's error.json), with the reason.
    not_read: str = ""

    def open(self) -> BinaryIO:
        if self.path is None:
            return sys.stdin.buffer
        handle: BinaryIO = open(self.path, "rb")  # noqa: SIM115 - closed by the caller
        magic = handle.read(2)
        handle.seek(0)
        if magic == b"\x1f\x8b":
            return gzip.GzipFile(fileobj=handle, mode="rb")  # type: ignore[return-value]
        return handle


@dataclass
class ReadStats:
    """What reading saw, so that nothing is dropped silently."""

    bytes_read: int = 0
    cut_lines: int = 0
    binary_sources: int = 0


@dataclass
class ReadSummary:
    """The ``read`` object of every ``rankscope.logs.*`` document: what was read, and what was not."""

    sources: list[str] = field(default_factory=list)
    bytes: int = 0
    cut_long_lines: int = 0
    skipped: list[str] = field(default_factory=list)


def _from_log_dir(path: Path) -> Optional[LogSource]:
    match = _LOG_DIR_FILE.search(path.as_posix())
    if match is None:
        return None
    return LogSource(str(path), path, fixed_label=match.group(1).encode())


def discover(inputs: Sequence[str]) -> list[LogSource]:
    """Turn command-line inputs into sources; raise for missing paths or directories without logs."""
    sources: list[LogSource] = []
    for item in inputs:
        if item == "-":
            sources.append(LogSource("<stdin>", None))
            continue
        path = Path(item)
        if path.is_dir():
            found = _scan_dir(path)
            if not found:
                raise NothingFoundError(
                    f"no log files under {item}",
                    f"give files directly, or a directory with {', '.join(LOG_SUFFIXES[:4])} files "
                    "or a torchrun --log-dir tree",
                )
            sources.extend(found)
        elif path.is_file():
            sources.append(_from_log_dir(path) or LogSource(str(path), path))
        elif path.exists():
            raise BadInputError(f"{item} is not a regular file or directory", "give a log file or directory")
        else:
            raise BadInputError(f"{item} does not exist", "check the path")
    return sources


def _scan_dir(root: Path) -> list[LogSource]:
    found: list[LogSource] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            from_tree = _from_log_dir(path)
            if from_tree is not None:
                found.append(from_tree)
            elif filename == "error.json" and "attempt_" in dirpath:
                reason = "torchrun error file, not read: the same traceback is in that rank's stderr.log"
                found.append(LogSource(str(path), path, not_read=reason))
            elif filename.endswith(LOG_SUFFIXES):
                found.append(LogSource(str(path), path))
    return found


def looks_binary(sample: bytes) -> bool:
    """NUL bytes, or mostly control bytes, in the first 8 KiB: not a text log."""
    head = sample[:8192]
    if not head:
        return False
    if b"\0" in head:
        return True
    controls = sum(1 for byte in head if byte < 9 or 13 < byte < 32)
    return controls > len(head) // 10


class BinaryInput(Exception):
    """Raised from :func:`read_windows` when a source is not text."""


#: A window ``(data, start, end)``: ``data[start:end]`` is whole lines, without copying ``data``.
Window = tuple[bytes, int, int]


def read_windows(source: LogSource, stats: ReadStats, chunk_size: int = CHUNK) -> Iterator[Window]:
    """Yield windows of whole lines (each ends with ``\\n``, a final line without one gets it).

    Blocks are not copied: a line cut by a block boundary is yielded as its own small window.
    Raises :class:`BinaryInput` before yielding anything if the source is not text, and
    :class:`BadInputError` if it cannot be read.
    """
    try:
        handle = source.open()
    except OSError as exc:
        raise BadInputError(
            f"cannot read {source.name}: {exc.strerror or exc}", "check the path and permissions"
        ) from None
    try:
        carry = b""
        first = True
        while True:
            try:
                block = handle.read(chunk_size)
            except (OSError, EOFError) as exc:  # truncated .gz, I/O error
                raise BadInputError(f"cannot read {source.name}: {exc}", "is the file complete?") from None
            if first:
                first = False
                if looks_binary(block):
                    stats.binary_sources += 1
                    raise BinaryInput(source.name)
            if not block:
                break
            stats.bytes_read += len(block)
            cut = block.rfind(b"\n")
            if cut < 0:
                carry += block
            else:
                begin = 0
                if carry:  # the line cut by the previous block boundary, joined alone
                    begin = block.find(b"\n") + 1
                    joined = carry + block[:begin]
                    yield (joined, 0, len(joined))
                if begin <= cut:
                    yield (block, begin, cut + 1)
                carry = block[cut + 1 :]
            if len(carry) > MAX_LINE:
                stats.cut_lines += 1
                joined = carry + b"\n"
                yield (joined, 0, len(joined))
                carry = b""
        if carry:
            joined = carry + b"\n"
            yield (joined, 0, len(joined))
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def window_bytes(window: Window) -> bytes:
    data, start, end = window
    return data if start == 0 and end == len(data) else data[start:end]
