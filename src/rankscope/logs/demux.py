"""De-interleave: one rank's lines (`logs grep`), or every rank into its own file (`logs split`)."""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, ClassVar, Optional

from rankscope.errors import ErrorReport
from rankscope.logs.interleaved import split_pieces
from rankscope.logs.labels import host_and_rank, label_text
from rankscope.logs.prefixes import SourceLabels, split_line, torch_global_rank
from rankscope.logs.sources import ReadSummary
from rankscope.serial import OMIT_NONE

if TYPE_CHECKING:
    from rankscope.logs.reading import OpenedSource


def prefix_literals(label: bytes) -> list[bytes]:
    """Every raw prefix start that can carry ``label`` (each match is confirmed by parsing).

    Literals that start with ``[`` are searched at line starts; the others anywhere in a line.
    """
    host, rank = host_and_rank(label)
    if rank is None:
        return [b"[" + label]
    number = str(rank).encode()
    if host is not None:
        literals = [b"[" + label + b"]", b"[" + host.encode() + number + b"]"]
        if host.isdigit():  # srun task / MPI rank around torchrun: "0: [default3]:" is "0:3"
            literals += [b"]:[default" + number + b"]", b": [default" + number + b"]"]
        return literals
    return [
        b"[" + number + b"]",
        b"[default" + number + b"]",
        b"[rank" + number + b"]",
        b"[trainer" + number + b"]",
        b"[worker" + number + b"]",
        b"[:" + number + b"]",
        b"," + number + b"]<std",  # Open MPI [job,rank]<stdout>:
        number + b": ",  # srun --label (any padding)
    ]


class RankGrep:
    """Find the lines of some ranks in chunks, fast.

    Only the literal prefix forms present in the first 8 MiB are searched (each with
    ``bytes.find`` per chunk); every hit is confirmed by parsing its prefix.
    """

    def __init__(self, labels: Sequence[bytes], keep_prefix: bool) -> None:
        self.labels = set(labels)
        self.keep_prefix = keep_prefix
        self._literals: dict[Optional[bytes], list[bytes]] = {}
        #: Lines looked at that held several ranks' writes (split at their markers).
        self.interleaved_lines = 0

    def _compile(self, sample: bytes, host: Optional[bytes]) -> list[bytes]:
        wanted = set(self.labels)
        if host is not None:  # this file's bare labels get its host: look for the bare rank too
            wanted |= {label[len(host) + 1 :] for label in self.labels if label.startswith(host + b":")}
        literals: list[bytes] = []
        for label in wanted:
            for literal in prefix_literals(label):
                if literal in sample and literal not in literals:
                    literals.append(literal)
        if not literals:
            literals = [lit for label in wanted for lit in prefix_literals(label)]
        return literals

    def lines(
        self, chunk: bytes, labels: SourceLabels, lo: int = 0, hi: int = -1, continues: bool = False
    ) -> Iterator[bytes]:
        """Matching lines of ``chunk[lo:hi]`` (whole lines), searched in place without a copy.

        ``continues``: the window is a later piece of a line cut for its length; its line is
        given without a prefix even with ``keep_prefix`` (it continues a line already given).
        """
        for _start, _label, line in self.found(chunk, labels, lo, hi, continues):
            yield line

    def found(
        self, chunk: bytes, labels: SourceLabels, lo: int = 0, hi: int = -1, continues: bool = False
    ) -> Iterator[tuple[int, bytes, bytes]]:
        """(where the line starts in ``chunk``, its label, the line as given) of each match."""
        if hi < 0:
            hi = len(chunk)
        if continues and self.keep_prefix:
            self.keep_prefix = False
            try:
                yield from self.found(chunk, labels, lo, hi)
            finally:
                self.keep_prefix = True
            return
        fixed_label, host = labels.fixed_label, labels.host
        if fixed_label is not None:
            label = labels.label(fixed_label)
            if label in self.labels:
                start = lo
                while start < hi:
                    end = chunk.find(b"\n", start, hi)
                    line = chunk[start : hi if end < 0 else end]
                    yield start, label, (b"[" + fixed_label + b"] " + line) if self.keep_prefix else line
                    if end < 0:
                        break
                    start = end + 1
            return
        literals = self._literals.get(host)
        if literals is None:
            literals = self._literals[host] = self._compile(chunk[lo : min(hi, lo + (8 << 20))], host)
        starts: set[int] = set()
        for literal in literals:
            if literal.startswith(b"["):
                # bytes.find on "[host:rank]" runs at memchr-like speed: no per-line Python work.
                # A hit inside a line may be the rank's text written into another rank's line
                # (see rankscope.logs.interleaved): its line is looked at too.
                pos = chunk.find(literal, lo, hi)
                while pos >= 0:
                    starts.add(
                        pos if pos == lo or chunk[pos - 1] == 10 else chunk.rfind(b"\n", lo, pos) + 1 or lo
                    )
                    pos = chunk.find(literal, pos + 1, hi)
            else:  # Open MPI and srun forms do not start the line: find them, then the line start
                pos = chunk.find(literal, lo, hi)
                while pos >= 0:
                    starts.add(max(lo, chunk.rfind(b"\n", lo, pos) + 1))
                    pos = chunk.find(literal, pos + 1, hi)
        for start in sorted(starts):
            end = chunk.find(b"\n", start, hi)
            line = chunk[start : hi if end < 0 else end]
            pieces = split_pieces(line) if line.count(b"[") > 1 else [line]
            if len(pieces) > 1:
                self.interleaved_lines += 1
            for piece in pieces:
                split = split_line(piece, labels.allow_srun, labels.dialect)
                label = labels.label(split.label)
                if label is not None and label in self.labels:
                    yield start, label, piece.rstrip(b"\r") if self.keep_prefix else split.text


class GlobalRanks:
    """Which labels torch's ``[rankN]:`` markers (:func:`torch_global_rank`) show global ranks under.

    ``torchrun --role host:`` labels lines ``[host:LOCAL]:``; the lines of a worker's uncaught
    exception also carry torch's ``[rankGLOBAL]:``. Fed every chunk, this finds the labels of
    the global ranks asked for (a ``bytes.find`` per rank and chunk; only marked lines parsed).
    """

    def __init__(self, numbers: Sequence[int]) -> None:
        self._needles = [(number, b"[rank%d]:" % number) for number in sorted(set(numbers))]
        #: Global rank -> the labels (naming a host) its marked lines carry.
        self.labels: dict[int, set[bytes]] = {}

    def feed(self, chunk: bytes, labels: SourceLabels) -> None:
        for number, needle in self._needles:
            pos = chunk.find(needle)
            while pos >= 0:
                start = chunk.rfind(b"\n", 0, pos) + 1
                end = chunk.find(b"\n", pos)
                end = len(chunk) if end < 0 else end
                split = split_line(chunk[start:end], labels.allow_srun, labels.dialect)
                label = labels.label(split.label)
                if (
                    label is not None
                    and torch_global_rank(split.raw_prefix) == number
                    and host_and_rank(label)[0] is not None
                ):
                    self.labels.setdefault(number, set()).add(label)
                pos = chunk.find(needle, end)


#: Bytes kept as they are in a split file name; every other byte is written %XX (upper-case hex).
_NAME_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_RANK_TAIL = re.compile(rb"_rank([0-9]+)\Z")
UNPREFIXED_FILE = "unprefixed.log"


def _quote(raw: bytes) -> str:
    return "".join(chr(byte) if byte in _NAME_SAFE else f"%{byte:02X}" for byte in raw)


def safe_file_name(label: Optional[bytes]) -> str:
    """The file ``logs split`` writes a label's lines to: unique per label and reversible
    (:func:`label_of_file_name`).

    ``host:N`` -> ``<host>_rank<N>.log``; any other label -> ``<label>.log``; no label ->
    ``unprefixed.log``. Bytes other than ASCII letters, digits, ``.``, ``_`` and ``-`` are
    percent-encoded (``a/b:0`` -> ``a%2Fb_rank0.log``, ``%`` -> ``%25``), and so is the ``_``
    of a rankless label that would otherwise read as ``_rank<N>``, or the first letter of a
    label spelled ``unprefixed``, so no two labels share a file.
    """
    if label is None:
        return UNPREFIXED_FILE
    host, sep, rank = label.rpartition(b":")
    if sep and rank.isdigit():
        return f"{_quote(host)}_rank{rank.decode()}.log"
    text = _quote(label)
    tail = _RANK_TAIL.search(text.encode())
    if tail is not None:
        text = text[: tail.start()] + "%5F" + text[tail.start() + 1 :]
    if text == "unprefixed":
        text = "%75nprefixed"
    return text + ".log"


def label_of_file_name(name: str) -> Optional[bytes]:
    """The label whose lines :func:`safe_file_name` put in ``name`` (None: ``unprefixed.log``)."""
    if name == UNPREFIXED_FILE:
        return None
    stem = name[: -len(".log")].encode()
    tail = _RANK_TAIL.search(stem)
    if tail is not None:
        return _unquote(stem[: tail.start()]) + b":" + tail.group(1)
    return _unquote(stem)


def _unquote(text: bytes) -> bytes:
    return re.sub(rb"%([0-9A-F]{2})", lambda match: bytes([int(match.group(1), 16)]), text)


def _drop_last_newline(handle: BinaryIO) -> None:
    """Remove the newline a file ends with (works for files opened to write or to append)."""
    handle.flush()
    size = os.fstat(handle.fileno()).st_size
    if size:
        os.ftruncate(handle.fileno(), size - 1)
        handle.seek(size - 1)


@dataclass
class SplitFile:
    """One file ``logs split`` wrote: the rank, the file, how many lines."""

    label: Optional[str]
    file: str
    lines: int


@dataclass
class SplitDocument:
    """``rankscope.logs.split``: the files written into ``out``."""

    SCHEMA: ClassVar[str] = "rankscope.logs.split/1"

    out: str
    files: list[SplitFile]
    read: ReadSummary = field(default_factory=ReadSummary)
    #: The error the verb ends with, when it printed what it found and still failed.
    error: Optional[ErrorReport] = field(default=None, metadata=OMIT_NONE)


class Splitter:
    """Send each rank's lines (prefix stripped) to its own file, named by :func:`safe_file_name`.

    ``open_file(name, again)`` opens that file for writing: new when ``again`` is false, for
    appending when true (the file was closed to keep at most ``max_open`` files open, least
    recently written first). The caller owns the directory.
    """

    def __init__(self, open_file: Callable[[str, bool], BinaryIO], max_open: int = 256) -> None:
        self.open_file = open_file
        self.max_open = max(1, max_open)
        #: Open files, least recently written first.
        self.files: OrderedDict[Optional[bytes], BinaryIO] = OrderedDict()
        self.counts: dict[Optional[bytes], int] = {}

    def _handle(self, label: Optional[bytes]) -> BinaryIO:
        handle = self.files.get(label)
        if handle is not None:
            self.files.move_to_end(label)
            return handle
        while len(self.files) >= self.max_open:
            self.files.popitem(last=False)[1].close()
        handle = self.files[label] = self.open_file(safe_file_name(label), label in self.counts)
        return handle

    def feed(self, chunk: bytes, labels: SourceLabels, continues: bool = False) -> None:
        """Write the lines of ``chunk``; ``continues``: it is a later piece of a line cut for
        its length (:attr:`rankscope.logs.reading.OpenedSource.continues`), appended to the
        line its rank's file ends with."""
        buffers: dict[Optional[bytes], list[bytes]] = {}
        for label, text in labels.lines(chunk):
            buffers.setdefault(label, []).append(text)
        for label, texts in buffers.items():
            handle = self._handle(label)
            if continues and self.counts.get(label):
                _drop_last_newline(handle)
                self.counts[label] -= 1
            handle.write(b"\n".join(texts) + b"\n")
            self.counts[label] = self.counts.get(label, 0) + len(texts)

    def close(self) -> None:
        while self.files:
            self.files.popitem(last=False)[1].close()

    def split(self, sources: Iterator[OpenedSource]) -> None:
        """Every source's lines into their files; the files are closed at the end (or on an error)."""
        try:
            for opened in sources:
                for chunk in opened.chunks:
                    self.feed(chunk, opened.labels, opened.continues)
        finally:
            self.close()

    def written(self, out_dir: Path) -> list[SplitFile]:
        """The files written so far, by file name; ``out_dir`` is the directory they are in."""
        rows = [
            SplitFile(label_text(label), str(out_dir / safe_file_name(label)), count)
            for label, count in self.counts.items()
        ]
        return sorted(rows, key=lambda row: row.file)
