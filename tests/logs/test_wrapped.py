"""A log pasted from a terminal, cut at the window's width, is read as the lines it was
(rankscope.logs.wrapped): the shape that tells such a paste, the joining rules, and what
`logs errors` then finds in tests/logs/corpus/logs/wrapped_terminal_paste.log (cut at 100 columns)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli_here

from rankscope.logs.reading import _starts_line
from rankscope.logs.wrapped import Unwrapper, sniff_width

CORPUS = Path(__file__).parent / "corpus" / "logs"
PASTE = CORPUS / "wrapped_terminal_paste.log"


def _cut(lines: list[str], width: int) -> bytes:
    out = []
    for line in lines:
        out += [line[i : i + width] for i in range(0, len(line), width)] or [""]
    return ("\n".join(out) + "\n").encode()


LONG = (
    "[rank1]: RuntimeError: " + "the message of an error that runs on and on past any terminal's width " * 3
)


def test_a_cut_paste_is_told_by_its_widest_lines_being_many_and_all_one_width() -> None:
    assert sniff_width(_cut([LONG, "[rank0]: short", LONG, LONG], 80), _starts_line) == 80
    # as written: lines of every length, the longest one of a kind
    assert (
        sniff_width(("\n".join([LONG, "[rank0]: short", LONG[:90], LONG[:70]]) + "\n").encode(), _starts_line)
        is None
    )
    # one line a column longer than the rest (a tab, a wide character): still a cut paste; one a
    # dozen columns longer is a line as written
    cut = _cut([LONG, LONG, LONG], 80)
    assert sniff_width(cut.replace(b"runs on", b"runs  on", 1), _starts_line) == 80
    assert sniff_width(cut + b"x" * 92 + b"\n", _starts_line) is None
    # a narrow paste is no terminal's
    assert sniff_width(_cut([LONG, LONG, LONG], 40), _starts_line) is None


@pytest.mark.parametrize("log", sorted(CORPUS.glob("*.log")), ids=lambda p: p.stem)
def test_no_log_of_the_corpus_but_the_cut_paste_is_taken_for_one(log: Path) -> None:
    head = log.read_bytes()[: 1 << 20]
    cut = log.name.startswith("wrapped_") or log.name == "cut_at_terminal_width.log"
    assert (sniff_width(head, _starts_line) is not None) is cut


def _unwrap(data: bytes, width: int) -> list[bytes]:
    unwrapper = Unwrapper(width, lambda line: line.startswith(b"[rank"))
    return (unwrapper.feed(data) + unwrapper.flush()).splitlines()


def test_the_pieces_of_a_line_are_joined_and_a_prefixed_line_starts_its_own() -> None:
    lines = [LONG, "[rank0]: short", LONG]
    assert _unwrap(_cut(lines, 80), 80) == [line.encode() for line in lines]
    # a line exactly as wide as the terminal, followed by a rank's own line: not joined
    exact = "[rank2]: " + "x" * 71
    assert _unwrap(_cut([exact, "[rank3]: next"], 80), 80) == [exact.encode(), b"[rank3]: next"]


def test_padding_a_terminal_copies_ends_the_line() -> None:
    padded = b"[rank6]: erwise, please attempt to debug the hang." + b" " * 29 + b"\ncontinued elsewhere\n"
    assert _unwrap(padded, 80) == [
        b"[rank6]: erwise, please attempt to debug the hang.",
        b"continued elsewhere",
    ]


def test_the_paste_reads_as_the_lines_it_was() -> None:
    text = run_cli_here("logs", "errors", str(PASTE)).stdout
    first = text.splitlines()[0]
    assert first.startswith(
        "root cause: rank 3: torch.OutOfMemoryError: CUDA out of memory (asked 3.06 GiB on GPU 3, capacity 39.39 GiB"
    )
    assert "train_one_epoch.py:144 in train_one_epoch —" in first
    assert "joined 9 line(s) cut at 100 columns (a paste from a terminal)" in text


def test_one_message_of_several_srun_tasks_is_no_terminal_s_width() -> None:
    """srun --label: eight tasks print one watchdog message of one length, each followed by its next
    line under its own label: whole lines, not a paste cut at that width."""
    message = (
        "[rank{n}]:[E311 22:47:02.0 ProcessGroupNCCL.cpp:1595] Watchdog caught collective operation timeout "
        + "x" * 120
    )
    lines = []
    for n in range(8):
        lines.append(f"{n}: " + message.format(n=n))
        lines.append(f"{n}: ncclRemoteError: A call failed possibly due to a network error")
    assert sniff_width(("\n".join(lines) + "\n").encode(), _starts_line) is None
