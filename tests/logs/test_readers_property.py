"""Property tests over the log readers: whatever the interleaving of writes, the NUL runs, the
block boundaries and the line cuts, every rank gets back exactly its own lines; and no bytes at
all make a reader raise."""

from __future__ import annotations

import gzip
import random
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from rankscope.logs.demux import RankGrep
from rankscope.logs.inventory import Inventory
from rankscope.logs.nccl import NcclScan
from rankscope.logs.prefixes import split_line
from rankscope.logs.reading import Reading
from rankscope.logs.sources import LogSource
from rankscope.logs.tracebacks import TracebackCollector

#: Text a rank writes after its marker: no brackets (a marker in the text is cut: see
#: rankscope.logs.interleaved), no newlines, NULs or control bytes.
texts = st.text(alphabet="abcxyz019 .,:=-_/'\"()", max_size=30)
MARKERS = ["[rank{r}]: ", "[node{h}:{r}]: ", "[gpu-{h}:{r}] ", "[default{r}]: "]

Label = Optional[bytes]


@contextmanager
def _file(data: bytes) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.log"
        path.write_bytes(data)
        yield path


def _read_back(
    path: Path, chunk_size: int, max_line: int = 4 << 20
) -> tuple[dict[Label, list[bytes]], Reading]:
    """Every rank's lines as the readers give them, later pieces of a cut line joined back."""
    reading = Reading([LogSource(str(path), path)], chunk_size=chunk_size, max_line=max_line)
    lines: dict[Label, list[bytes]] = {}
    for opened in reading.sources():
        for chunk in opened.chunks:
            pairs = list(opened.labels.lines(chunk))
            if opened.continues and pairs:
                label, text = pairs.pop(0)
                lines[label][-1] += text
            for label, text in pairs:
                lines.setdefault(label, []).append(text)
    return lines, reading


@st.composite
def rank_logs(draw: st.DrawFn) -> tuple[str, dict[int, list[str]]]:
    marker = draw(st.sampled_from(MARKERS))
    ranks = draw(st.lists(st.integers(0, 40), min_size=1, max_size=6, unique=True))
    return marker, {rank: draw(st.lists(texts, min_size=1, max_size=8)) for rank in ranks}


def _marker(style: str, rank: int) -> str:
    return style.format(r=rank, h=rank % 3)


def _expected(style: str, lines: dict[int, list[str]]) -> dict[Label, list[bytes]]:
    """What each rank wrote, as the prefix parser reads a clean line of it."""
    expected: dict[Label, list[bytes]] = {}
    for rank, texts_ in lines.items():
        for text in texts_:
            split = split_line((_marker(style, rank) + text).encode())
            expected.setdefault(split.label, []).append(split.text)
    return expected


@settings(max_examples=80, deadline=None)
@given(rank_logs(), st.randoms(use_true_random=False), st.integers(0, 3000), st.integers(16, 300))
def test_interleaved_writes_give_every_rank_its_own_lines(
    log: tuple[str, dict[int, list[str]]], rng: random.Random, nul_run: int, chunk_size: int
) -> None:
    """Each line is written as print does (text, then newline, two writes); the writes of the
    ranks interleave in any order that keeps each rank's own order; a copytruncate hole leads."""
    style, lines = log
    pending = {
        rank: [w for text in texts_ for w in ((_marker(style, rank) + text).encode(), b"\n")]
        for rank, texts_ in lines.items()
    }
    writes: list[bytes] = []
    while pending:
        rank = rng.choice(sorted(pending))
        writes.append(pending[rank].pop(0))
        if not pending[rank]:
            del pending[rank]
    with _file(b"\0" * nul_run + b"".join(writes)) as path:
        got, reading = _read_back(path, chunk_size)
    assert got == _expected(style, lines)
    assert reading.stats.nul_bytes == nul_run


@settings(max_examples=60, deadline=None)
@given(rank_logs(), st.randoms(use_true_random=False), st.integers(24, 64), st.integers(8, 200))
def test_long_lines_are_cut_without_losing_their_rank_or_bytes(
    log: tuple[str, dict[int, list[str]]], rng: random.Random, max_line: int, chunk_size: int
) -> None:
    style, lines = log
    lines = {rank: [text * rng.randint(1, 6) for text in texts_] for rank, texts_ in lines.items()}
    order = [rank for rank, texts_ in lines.items() for _ in texts_]
    rng.shuffle(order)
    cursor = dict.fromkeys(lines, 0)
    physical: list[str] = []
    for rank in order:
        physical.append(_marker(style, rank) + lines[rank][cursor[rank]])
        cursor[rank] += 1
    with _file(("\n".join(physical) + "\n").encode()) as path:
        got, reading = _read_back(path, chunk_size, max_line)
    assert got == _expected(style, lines)
    assert reading.stats.cut_lines <= sum(1 for line in physical if len(line.encode()) > max_line)
    assert reading.stats.cut_pieces >= 2 * reading.stats.cut_lines


def _gzipped_and_cut(data: bytes, cut: float) -> bytes:
    packed = gzip.compress(data)
    return packed[: max(1, int(len(packed) * cut))]


@settings(max_examples=120, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=4000),
        st.lists(
            st.sampled_from(
                [
                    b"\0" * 50,
                    b"[rank1]: a",
                    b"[n:2]:Traceback (most recent call last):",
                    b"\n",
                    b"\r",
                    b"[1,3]<stdout>:x",
                    b'  File "a.py", line 1, in f',
                    b"\xff",
                    b"NCCL INFO",
                    b"ValueError: v",
                    b"\x1b[0m",
                    b"[",
                    b"]: ",
                ]
            ),
            max_size=60,
        ).map(b"".join),
    ),
    st.sampled_from([None, 0.4, 0.9, 1.0]),
    st.integers(1, 300),
    st.integers(4, 100),
)
def test_no_bytes_make_a_reader_raise(
    data: bytes, gzip_cut: Optional[float], chunk_size: int, max_line: int
) -> None:
    if gzip_cut is not None:
        data = _gzipped_and_cut(data, gzip_cut)
    with _file(data) as path:
        reading = Reading([LogSource(str(path), path)], chunk_size=chunk_size, max_line=max_line)
        inventory, collector, nccl = Inventory(), TracebackCollector(), NcclScan()
        grep = RankGrep([b"1", b"n:2", b"3"], keep_prefix=True)
        for opened in reading.sources():
            collector.start_source(opened.source.name, opened.labels)
            for data_, lo, hi in opened.windows:
                chunk = data_[lo:hi]
                inventory.feed(chunk, opened.labels)
                if opened.continues:
                    inventory.continued_line(chunk, opened.labels)
                collector.feed(chunk)
                nccl.feed(chunk, opened.labels)
                list(grep.lines(data_, opened.labels, lo, hi, opened.continues))
        collector.finish()
        reading.notes()
        reading.summary()
    assert inventory.lines >= 0 and all(row.lines >= 0 for row in inventory.rows())
