"""Find and stream log inputs: files, directories, ``-`` (stdin), ``.gz``, torchrun ``--log-dir`` trees.

Everything is read as bytes in large chunks that end on a line boundary, so nothing is ever
loaded whole and invalid UTF-8 never raises. What real files hold besides clean lines:

- Runs of NUL bytes (logrotate ``copytruncate`` leaves the truncated part as a hole of zeros
  ahead of what the job writes next): dropped and counted (``ReadStats.nul_bytes``). A source
  is refused as binary only from its text: see :func:`looks_binary`.
- A compressed file cut short (the copy of a log still being written, a transfer that
  stopped): read as far as it goes, with a note (``ReadStats.notes``).
- Lines longer than ``MAX_LINE``: cut into pieces so that a file without newlines cannot
  exhaust memory; each piece after the first gets the rank prefix of the line it belongs to
  (``LineShape``), so it stays with its rank. Counted once per line.
"""

from __future__ import annotations

import os
import re
import sys
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Optional, Protocol

from rankscope.errors import BadInputError, NothingFoundError

CHUNK = 1 << 20
MAX_LINE = 4 << 20
#: File names read when a directory is given (plus torchrun's stdout.log/stderr.log).
LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".log.gz", ".out.gz", ".err.gz", ".txt.gz", ".gz")
#: torchrun --log-dir layout: <dir>/<run_id>_<rand>/attempt_<n>/<local_rank>/{stdout,stderr}.log
_LOG_DIR_FILE = re.compile(r"attempt_\d+/(\d+)/(?:stdout|stderr)\.log$")
#: A file of one rank's output named after it (``rank3.log``, ``train_rank_03.out``, ``log-rank-12.txt``:
#: ``python train.py > logs/rank_${RANK}.log``); not a node's (``node_rank1``) or a local rank's.
_NAMED_RANK = re.compile(r"(?<![a-z])(?<!node[_-])(?<!local[_-])rank[_-]?(\d{1,6})(?![0-9])", re.IGNORECASE)


@dataclass(frozen=True)
class LogSource:
    """One input stream. ``fixed_label`` is set when the path names the rank (torchrun log dirs)."""

    name: str
    path: Optional[Path]
    fixed_label: Optional[bytes] = None
    #: The rank its file name gives (``rank3.log``): its label when no line carries a rank prefix.
    named_label: Optional[bytes] = None
    #: Set for files found but not read as logs (torchrun's error.json), with the reason.
    not_read: str = ""
    #: The byte a plain file is read from (what came before belongs to something else); its
    #: ``name`` says so, since line numbers then count from there.
    start: int = 0

    def open(self) -> Stream:
        """The source's bytes, gunzipped when they start with the gzip magic (files and stdin)."""
        if self.path is None:
            stdin = sys.stdin.buffer
            peek = getattr(stdin, "peek", None)
            if peek is not None and peek(2)[:2] == GZIP_MAGIC:
                return Gunzip(stdin, self.name)
            return stdin
        handle: BinaryIO = open(self.path, "rb")  # noqa: SIM115 - closed by the caller
        magic = handle.read(2)
        handle.seek(0)
        if magic == GZIP_MAGIC:
            return Gunzip(handle, self.name)
        handle.seek(self.start)
        return handle


GZIP_MAGIC = b"\x1f\x8b"


class Stream(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class Gunzip:
    """Decompress a gzip stream (one member or several, as ``cat a.gz b.gz`` makes) block by block.

    Unlike :class:`gzip.GzipFile` it gives every byte that can be decompressed before a
    truncation or a corrupt block, and then ends with ``problem`` set instead of raising: zlib
    emits what it has decoded as it goes, so a cut file yields all of its text up to the cut.
    Each ``read`` returns at most ``size`` bytes however well the data compressed.
    """

    RAW_BLOCK = 1 << 16

    def __init__(self, raw: BinaryIO, name: str) -> None:
        self.raw = raw
        self.name = name
        self._unzip = zlib.decompressobj(wbits=31)
        self._done = False
        #: Bytes of text decompressed so far.
        self.text_bytes = 0
        #: Why reading stopped early (a sentence), or "" when the stream ended properly.
        self.problem = ""

    def read(self, size: int = -1, /) -> bytes:
        size = size if size > 0 else 1 << 20
        while not self._done:
            try:
                data = self._step(size)
            except zlib.error as exc:
                self._stop(f"is corrupt after {self.text_bytes:,} bytes of text ({exc})")
                return b""
            if data:
                self.text_bytes += len(data)
                return data
        return b""

    def _step(self, size: int) -> bytes:
        unzip = self._unzip
        if unzip.unconsumed_tail:
            return unzip.decompress(unzip.unconsumed_tail, size)
        if unzip.eof:  # a member ended: another may follow
            rest = unzip.unused_data or self.raw.read(self.RAW_BLOCK)
            if len(rest) < 2 and rest:
                rest += self.raw.read(self.RAW_BLOCK)
            if not rest or rest.strip(b"\0") == b"":  # the end (tar-style zero padding is fine)
                self._done = True
                return b""
            if not rest.startswith(GZIP_MAGIC):
                self._stop(
                    f"has {len(rest):,}+ bytes of non-gzip data after {self.text_bytes:,} bytes of text"
                )
                return b""
            self._unzip = unzip = zlib.decompressobj(wbits=31)
            return unzip.decompress(rest, size)
        raw = self.raw.read(self.RAW_BLOCK)
        if not raw:
            self._stop(f"is truncated after {self.text_bytes:,} bytes of text")
            return b""
        return unzip.decompress(raw, size)

    def _stop(self, problem: str) -> None:
        self._done = True
        self.problem = problem

    def close(self) -> None:
        self.raw.close()


@dataclass
class ReadStats:
    """What reading saw, so that nothing is dropped silently."""

    bytes_read: int = 0
    #: Lines longer than ``MAX_LINE`` (each counted once, however many pieces it was cut into).
    cut_lines: int = 0
    #: The pieces those lines were cut into (each is read as a line of the same rank).
    cut_pieces: int = 0
    binary_sources: int = 0
    #: NUL bytes dropped (runs of zeros: a log truncated in place by copytruncate).
    nul_bytes: int = 0
    #: Physical lines that held the text of several ranks, split at their embedded rank markers.
    interleaved_lines: int = 0
    #: Empty lines dropped after those: the newlines the other ranks wrote after their text.
    interleaved_newlines: int = 0
    #: Physical lines joined to the line they continue (a paste hard-wrapped at a terminal's width).
    wrapped_lines: int = 0
    wrap_width: int = 0
    #: One sentence per source that could not be read to its end (a truncated .gz), and why.
    notes: list[str] = field(default_factory=list)


@dataclass
class ReadSummary:
    """The ``read`` object of every ``rankscope.logs.*`` document: what was read, and what was not."""

    sources: list[str] = field(default_factory=list)
    bytes: int = 0
    cut_long_lines: int = 0
    skipped: list[str] = field(default_factory=list)
    #: NUL bytes dropped (see :class:`ReadStats`).
    nul_bytes: int = 0
    #: Physical lines split at embedded rank markers (write-interleaved output).
    interleaved_lines: int = 0
    #: Everything a reader of the result should know about how the input was read, as sentences
    #: (the notes ``logs`` prints: NUL runs, truncated archives, cut and repaired lines).
    notes: list[str] = field(default_factory=list)


def _from_log_dir(path: Path) -> Optional[LogSource]:
    match = _LOG_DIR_FILE.search(path.as_posix())
    if match is None:
        return None
    return LogSource(str(path), path, fixed_label=match.group(1).encode())


def _plain(path: Path) -> LogSource:
    """A file of no known layout; the rank its name gives, if any (:data:`_NAMED_RANK`)."""
    named = _NAMED_RANK.findall(path.name)
    if len(named) != 1:  # none, or several (rank0_rank1.log): no one rank's
        return LogSource(str(path), path)
    return LogSource(str(path), path, named_label=str(int(named[0])).encode())


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
            sources.append(_from_log_dir(path) or _plain(path))
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
                found.append(_plain(path))
    return found


#: Magic numbers of binary files that could otherwise pass for text in their first bytes.
_BINARY_MAGIC = (b"\x7fELF", b"PK\x03\x04", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd", b"BZh91AY&SY")
#: More NUL runs than this in the first 8 KiB of text: NULs scattered through the data.
_MAX_NUL_RUNS = 4
_NUL_RUN = re.compile(rb"\0+")


def looks_binary(sample: bytes) -> bool:
    """Is this not a text log? ``sample`` is the start of the source's text (its first 8 KiB are
    looked at), leading NUL bytes already dropped.

    A text log may hold a few runs of NUL bytes (a file truncated in place gets a hole of zeros);
    binary data has NULs scattered all through it (executables, UTF-16, random bytes) or many
    control bytes. So: binary when it starts with a known binary magic number (ELF, zip, xz,
    zstd, bzip2), or holds more than 4 separate runs of NUL bytes, or more than 10% of its other
    bytes are control bytes (other than tab, newline, CR, form feed and vertical tab).
    """
    head = sample[:8192]
    if not head:
        return False
    if head.startswith(_BINARY_MAGIC):
        return True
    if b"\0" in head:
        if len(_NUL_RUN.findall(head)) > _MAX_NUL_RUNS:
            return True
        head = head.replace(b"\0", b"")
    controls = sum(1 for byte in head if byte < 9 or 13 < byte < 32)
    return controls > len(head) // 10


class BinaryInput(Exception):
    """Raised from :func:`read_windows` when a source is not text."""


#: A window ``(data, start, end)``: ``data[start:end]`` is whole lines, without copying ``data``.
Window = tuple[bytes, int, int]


@dataclass
class LineShape:
    """How a long line's continuation pieces keep its rank: ``prefix_of(head)`` gives the raw
    prefix of a line that starts with ``head`` (``b""`` when it has none). The reader of a
    source sets it once it knows which prefixes the source carries; it may change while the
    source is read (windows are produced lazily).
    """

    prefix_of: Callable[[bytes], bytes] = lambda head: b""
    #: True while the window just yielded is a later piece of a cut line: its text continues
    #: the line before it (``logs grep`` and ``split`` join it back, counts leave it out).
    continuing: bool = False


def read_windows(
    source: LogSource,
    stats: ReadStats,
    chunk_size: int = CHUNK,
    shape: Optional[LineShape] = None,
    max_line: int = MAX_LINE,
) -> Iterator[Window]:
    """Yield windows of whole lines (each ends with ``\\n``, a final line without one gets it).

    Blocks are not copied unless they hold NUL bytes: a line cut by a block boundary is yielded
    as its own small window. Raises :class:`BinaryInput` before yielding anything if the source
    is not text, and :class:`BadInputError` if it cannot be opened. A read error part-way (an
    I/O error, a truncated or corrupt ``.gz``) ends the source with a note in ``stats.notes``:
    what was read before it is kept.
    """
    shape = shape if shape is not None else LineShape()
    try:
        handle = source.open()
    except OSError as exc:
        raise BadInputError(
            f"cannot read {source.name}: {exc.strerror or exc}", "check the path and permissions"
        ) from None
    try:
        yield from _windows(handle, source.name, stats, chunk_size, shape, max_line)
    finally:
        problem = getattr(handle, "problem", "")
        if problem:
            stats.notes.append(f"{source.name} {problem}; read what was there")
        if handle is not sys.stdin.buffer:
            handle.close()


def _windows(
    handle: Stream, name: str, stats: ReadStats, chunk_size: int, shape: LineShape, max_line: int
) -> Iterator[Window]:
    carry = b""
    sniffed = False
    #: The raw prefix of a line being cut into pieces (None: no line is being cut).
    piece_prefix: Optional[bytes] = None
    while True:
        try:
            block = handle.read(chunk_size)
        except (OSError, EOFError, zlib.error) as exc:  # an I/O error part-way: keep what was read
            stats.notes.append(f"{name} could not be read to its end ({exc}); read what was there")
            block = b""
        if not block:
            break
        if b"\0" in block:
            if not sniffed:
                text_start = len(block) - len(block.lstrip(b"\0"))
                if text_start < len(block):  # the first text: judge it with its NULs
                    sniffed = True
                    if looks_binary(block[text_start:]):
                        stats.binary_sources += 1
                        raise BinaryInput(name)
            kept = block.replace(b"\0", b"")
            stats.nul_bytes += len(block) - len(kept)
            block = kept
            if not block:
                continue
        elif not sniffed:
            sniffed = True
            if looks_binary(block):
                stats.binary_sources += 1
                raise BinaryInput(name)
        stats.bytes_read += len(block)  # text bytes: NULs are counted apart
        cut = block.rfind(b"\n")
        if cut < 0:
            carry += block
        else:
            begin = 0
            if carry or piece_prefix is not None:  # the line cut by the previous block boundary
                begin = block.find(b"\n") + 1
                joined = carry + block[:begin]
                if piece_prefix is not None:  # the last piece of a long line
                    if joined != b"\n" and joined != b"\r\n":
                        stats.cut_pieces += 1
                        shape.continuing = True
                        yield (piece_prefix + joined, 0, len(piece_prefix) + len(joined))
                    piece_prefix = None
                else:
                    shape.continuing = False
                    yield (joined, 0, len(joined))
            if begin <= cut:
                shape.continuing = False
                yield (block, begin, cut + 1)
            carry = block[cut + 1 :]
        while len(carry) > max_line:
            piece, carry = carry[:max_line], carry[max_line:]
            shape.continuing = piece_prefix is not None
            if piece_prefix is None:
                stats.cut_lines += 1
                piece_prefix = shape.prefix_of(piece[:4096])
            else:
                piece = piece_prefix + piece
            stats.cut_pieces += 1
            piece += b"\n"
            yield (piece, 0, len(piece))
    shape.continuing = False
    if carry:
        if piece_prefix is not None:
            stats.cut_pieces += 1
            carry = piece_prefix + carry
            shape.continuing = True
        joined = carry + b"\n"
        yield (joined, 0, len(joined))
    shape.continuing = False


def window_bytes(window: Window) -> bytes:
    data, start, end = window
    return data if start == 0 and end == len(data) else data[start:end]
