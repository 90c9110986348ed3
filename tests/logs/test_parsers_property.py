"""Property-based tests (hypothesis) for the prefix parser, the traceback collector and folding."""

from __future__ import annotations

import random
from typing import Optional
from unittest import mock

from ClusterShell.RangeSet import RangeSet
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rankscope.logs.labels import fold_labels, host_and_rank
from rankscope.logs.prefixes import PLAIN, SourceLabels, split_line, unlabelled_lines
from rankscope.logs.tracebacks import TracebackCollector
from rankscope.model import parse_label, rank_label

hosts = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)
ranks = st.integers(min_value=0, max_value=100_000)
texts = st.text(alphabet=st.characters(blacklist_characters="\n\r\x1b", codec="utf-8"), max_size=80)


@given(hosts, ranks, texts, st.sampled_from([":", " "]))
def test_host_rank_prefix_round_trip(host: str, rank: int, text: str, sep: str) -> None:
    assume(not text.startswith("[rank"))
    split = split_line(f"[{host}:{rank}]{sep}{text}".encode())
    assert split.label == f"{host}:{rank}".encode()
    assert split.text == text.encode()


@given(st.integers(min_value=0, max_value=99), ranks, st.sampled_from(["stdout", "stderr"]), texts)
def test_open_mpi_tag_round_trip(job: int, rank: int, stream: str, text: str) -> None:
    assume("]<std" not in text and not text.startswith("[rank"))
    split = split_line(f"[{job},{rank}]<{stream}>:{text}".encode())
    assert split.label == str(rank).encode()
    assert split.text == text.encode()


@given(ranks, texts)
def test_torchrun_default_role_and_nested_torch_prefix(rank: int, text: str) -> None:
    assume(not text.startswith("[rank"))
    split = split_line(f"[default{rank}]:[rank{rank}]: {text}".encode())
    assert split.label == str(rank).encode()
    assert split.text == text.encode()


@given(ranks, texts)
def test_srun_label_only_when_enabled(rank: int, text: str) -> None:
    line = f"{rank:>3}: {text}".encode()
    assert split_line(line, allow_srun=True).label == str(rank).encode()
    assert split_line(line, allow_srun=False).label is None


exception_names = st.from_regex(r"[A-Z][a-zA-Z]{0,12}(Error|Exception)", fullmatch=True)
messages = st.from_regex(r"[a-z0-9 ,.'=_-]{0,40}", fullmatch=True)
functions = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)


@st.composite
def tracebacks(draw: st.DrawFn) -> tuple[list[str], str, list[str]]:
    funcs = draw(st.lists(functions, min_size=1, max_size=6))
    exc = f"{draw(exception_names)}: {draw(messages)}".rstrip()
    lines = ["Traceback (most recent call last):"]
    for index, func in enumerate(funcs):
        lines.append(f'  File "/src/m{index}.py", line {index + 1}, in {func}')
        lines.append(f"    {func}()")
    lines.append(exc)
    return lines, exc, funcs


@settings(max_examples=60, deadline=None)
@given(
    st.lists(tracebacks(), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=2**32),
    st.integers(min_value=1, max_value=40),
)
def test_interleaved_tracebacks_are_rebuilt_per_rank(
    per_rank: list[tuple[list[str], str, list[str]]], seed: int, lines_per_chunk: int
) -> None:
    rng = random.Random(seed)
    cursors = {rank: 0 for rank in range(len(per_rank))}
    log: list[bytes] = []
    while cursors:
        rank = rng.choice(sorted(cursors))
        if rng.random() < 0.2:
            log.append(f"[h{rank % 3}:{rank}]:INFO unrelated chatter {rng.random()}".encode())
            continue
        log.append(f"[h{rank % 3}:{rank}]:{per_rank[rank][0][cursors[rank]]}".encode())
        cursors[rank] += 1
        if cursors[rank] == len(per_rank[rank][0]):
            del cursors[rank]
    collector = TracebackCollector()
    collector.start_source("t")
    for start in range(0, len(log), lines_per_chunk):  # chunk boundaries anywhere between lines
        collector.feed(b"".join(line + b"\n" for line in log[start : start + lines_per_chunk]))
    collector.finish()
    got = {tb.label: tb for tb in collector.tracebacks}
    assert len(collector.tracebacks) == len(per_rank)
    for rank, (_, exc, funcs) in enumerate(per_rank):
        tb = got[f"h{rank % 3}:{rank}".encode()]
        assert tb.exception == exc
        assert [f.function for f in tb.frames] == funcs
        assert not tb.truncated


@given(hosts, ranks)
def test_labels_read_back_as_the_shared_identity(host: str, rank: int) -> None:
    """A label in a log is spelled as model.rank_label spells it, and read as model.parse_label reads it."""
    label = rank_label(host, rank).encode()
    assert host_and_rank(label) == (host, rank) == parse_label(label.decode())
    assert host_and_rank(str(rank).encode()) == (None, rank)  # a bare rank: no host known
    assert host_and_rank(host.encode()) == (host, None) == parse_label(host)


@given(st.sets(st.integers(min_value=0, max_value=5000), min_size=1, max_size=200))
def test_fold_bare_ranks_expands_back(numbers: set[int]) -> None:
    folded = fold_labels([str(n).encode() for n in numbers])
    assert {int(n) for n in RangeSet(folded)} == numbers


line_kinds = st.sampled_from(
    [
        "[n{h}:{r}]:2024-05-01 10:00:0{r}.5 INFO step",
        '[n{h}:{r}]:  File "x.py", line 1, in f',
        "[default{r}]:[rank{r}]: ValueError: x",
        "[1,{r}]<stdout>:hello",
        "[1,{r}]<stderr>:warn",
        "[{r}]:",
        "[{r}]:2024-05-01 10:00:01 text",
        "plain launcher line",
        "[INFO] not a rank",
        "",
    ]
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(line_kinds, st.integers(0, 3), st.integers(0, 9)), max_size=60),
    st.sampled_from([None, 1, 200]),
)
def test_inventory_fast_path_counts_like_the_per_line_parser(
    rows: list[tuple[str, int, int]], tail: Optional[int]
) -> None:
    """``tail``: how much of the block is read backwards for last timestamps before the heads left
    are searched one by one (small: the searches do the work)."""
    from rankscope.logs import inventory

    chunk = b"".join(kind.format(h=h, r=r).encode() + b"\n" for kind, h, r in rows)
    fast, slow = inventory.Inventory(), inventory.Inventory()
    with mock.patch.object(inventory, "_TAIL_SCAN", tail or inventory._TAIL_SCAN):
        fast.feed(chunk)
    slow._feed_lines(chunk, PLAIN)
    assert fast.document() == slow.document()


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.lists(st.from_regex(r"[a-z0-9 :=]{0,12}", fullmatch=True), min_size=1, max_size=4),
        min_size=1,
        max_size=5,
    ),
    st.integers(min_value=0, max_value=2**32),
)
def test_open_mpi_fragments_are_joined_into_lines(per_rank_lines: list[list[str]], seed: int) -> None:
    """mpirun --tag-output tags each write: a line's text and newline may arrive as separate writes,
    interleaved with other ranks' writes on the same physical line (seen in real runs here)."""
    from rankscope.logs.ompi import OmpiJoiner

    rng = random.Random(seed)
    writes: dict[int, list[str]] = {}
    for rank, lines in enumerate(per_rank_lines):
        pieces: list[str] = []
        for line in lines:
            cut = rng.randint(0, len(line))
            pieces += [piece for piece in (line[:cut], line[cut:]) if piece] + ["\n"]
        writes[rank] = pieces
    physical = ""
    while writes:
        rank = rng.choice(sorted(writes))
        physical += f"[1,{rank}]<stdout>:" + writes[rank].pop(0)
        if not writes[rank]:
            del writes[rank]
    joiner = OmpiJoiner()
    out = (joiner.feed(physical.encode()) + joiner.flush()).decode().splitlines()
    for rank, lines in enumerate(per_rank_lines):
        tag = f"[1,{rank}]<stdout>:"
        assert [line[len(tag) :] for line in out if line.startswith(tag)] == lines


_LINE_PARTS = [
    "[nodeA:0]:", "[3]:", "[3]", "[3] ", "[12]:", "[default2]:", "[1,2]<stdout>:", "[rank3]: ", "[W1123 ",
    "[x]", "[", "]", " ", ":", "[host:3] ", "[a b3]:", "\r", "\x1b[0m", "7: ", "0: [default1]:", "x", "3",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_LINE_PARTS), max_size=4).map("".join), max_size=12), st.booleans())
def test_lines_without_a_prefix_are_counted_as_split_line_reads_them(lines: list[str], srun: bool) -> None:
    """`logs errors` counts them at C speed; `logs ranks` and `split` per line: the same number."""
    chunk = "".join(line + "\n" for line in lines).encode()
    labels = SourceLabels(allow_srun=srun)
    expected = sum(1 for line in lines if split_line(line.encode(), srun).label is None)
    assert unlabelled_lines(chunk, labels) == expected
    assert sum(1 for label, _ in labels.lines(chunk) if label is None) == expected
