"""The only I/O of the trace readers: find ``trace-*`` files and open them safely.

A file is opened ``O_NONBLOCK|O_NOFOLLOW`` and read only when ``fstat`` says it is a regular file:
a FIFO planted under a trace name cannot block the reader, a symbolic link is not followed, a
device is not read. Records are read with ``pread``, a chunk at a time (decode.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from rankscope.errors import BadInputError, ExitCode, NothingFoundError, RankscopeError
from rankscope.trace.analyse import Unreadable
from rankscope.trace.decode import Layout, Source, read_layout

T = TypeVar("T")

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
}


def trace_files(target: str) -> list[Path]:
    """``target`` itself unless it is a directory, else every ``trace-*`` entry under it that is not
    a directory (recursively; a link is listed, never followed, and refused when opened)."""
    path = Path(target)
    if not path.is_dir():
        if not os.path.lexists(path):
            raise BadInputError(
                f"{target}: no such file or directory", "pass the --out directory of rankscope trace run"
            )
        return [path]
    found = []
    pending = [os.fspath(path)]
    while pending:  # iterative: a directory nested thousands deep cannot exhaust the recursion limit
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.name.startswith("trace-"):
                        found.append(Path(entry.path))  # a link or a FIFO is refused when opened
        except OSError:
            continue  # a directory that vanished or may not be read: the others are
    if not found:
        raise NothingFoundError(
            f"no trace-* files under {target}", "run the job with rankscope trace run --out DIR"
        )
    return sorted(found)


class FileSource(Source):
    """``pread`` on an open descriptor; holes found with ``SEEK_DATA``."""

    def __init__(self, fd: int, path: Path, size: int) -> None:
        self.fd, self.path, self.size = fd, path, size

    def read(self, offset: int, size: int) -> bytes:
        try:
            return os.pread(self.fd, size, offset)
        except OSError as exc:
            raise BadInputError(f"{self.path}: {exc.strerror or exc}", "check the file") from None

    def next_data(self, offset: int) -> int:
        try:
            return os.lseek(self.fd, offset, os.SEEK_DATA)
        except OSError as exc:
            return self.size if exc.errno == errno.ENXIO else offset  # ENXIO: only a hole follows


@dataclass(frozen=True)
class OpenTrace:
    layout: Layout
    source: Source


@contextlib.contextmanager
def open_trace(path: Path) -> Iterator[OpenTrace]:
    """One trace file, its header checked (BadInputError, one line, for anything else)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadInputError(
                f"{path}: a symbolic link, not followed", "pass the trace file itself"
            ) from None
        raise BadInputError(f"{path}: {exc.strerror or exc}", "check the path and its permissions") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            what = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            raise BadInputError(
                f"{path}: {what}, not a trace file", "pass a trace-* file written by rankscope trace"
            )
        source = FileSource(fd, path, info.st_size)
        yield OpenTrace(read_layout(os.fspath(path), source, info.st_size), source)
    finally:
        os.close(fd)


def read_each(target: str, read: Callable[[OpenTrace], T]) -> tuple[list[T], tuple[Unreadable, ...]]:
    """``read(open_trace)`` for every trace file under ``target``; a file that cannot be read is
    listed as unreadable and the others go on (all unreadable: the first one's error, exit 8)."""
    results: list[T] = []
    bad: list[Unreadable] = []
    for path in trace_files(target):
        try:
            with open_trace(path) as opened:
                results.append(read(opened))
        except RankscopeError as exc:
            named = f"{os.fspath(path)}: "  # the report names the file once
            reason = exc.message[len(named) :] if exc.message.startswith(named) else exc.message
            bad.append(Unreadable(os.fspath(path), reason))
    if not results and bad:
        raise RankscopeError(
            f"{bad[0].path}: {bad[0].reason}"
            + (f" (and {len(bad) - 1} more unreadable files)" if len(bad) > 1 else ""),
            "pass trace-* files written by rankscope trace",
            ExitCode.BAD_INPUT,
        )
    return results, tuple(bad)
