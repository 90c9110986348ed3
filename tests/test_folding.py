from __future__ import annotations

import pytest
from ClusterShell.NodeSet import NodeSet
from ClusterShell.RangeSet import RangeSet
from hypothesis import given
from hypothesis import strategies as st

from rankscope.folding import describe_members, fold_host_ranks, fold_hosts, fold_ints, parse_ints
from rankscope.model import Member


@given(st.sets(st.integers(min_value=0, max_value=5000), max_size=300))
def test_fold_ints_is_clustershell_notation(values: set[int]) -> None:
    expected = str(RangeSet.fromlist([str(v) for v in values])) if values else ""
    assert fold_ints(values) == expected
    if values:
        assert parse_ints(fold_ints(values)) == sorted(values)


def test_describe_members() -> None:
    assert describe_members([Member("h", 10, 2)]) == "rank 2"
    ranks = [Member("n1", 1, 0), Member("n1", 2, 1), Member("n2", 3, 3)]
    assert describe_members(ranks) == "ranks 0-1,3"
    assert describe_members(ranks, with_hosts=True) == "ranks 0-1,3 on n[1-2]"
    assert describe_members([Member("h", 41, None), Member("h", 57, None)]) == "pids 41,57"


@given(
    st.sets(
        st.tuples(st.sampled_from(["gpu", "node-", "n", "cn"]), st.integers(0, 300), st.sampled_from([0, 3])),
        max_size=60,
    ),
    st.sets(st.sampled_from(["login", "head-a", "x1y2"]), max_size=2),
)
def test_fold_hosts_is_nodeset_notation(names: set[tuple[str, int, int]], odd: set[str]) -> None:
    hosts = {f"{prefix}{number:0{width}d}" for prefix, number, width in names} | odd
    expected = str(NodeSet.fromlist(sorted(hosts))) if hosts else ""
    assert fold_hosts(hosts) == expected
    if hosts:
        assert set(NodeSet(fold_hosts(hosts))) == hosts


def test_fold_hosts() -> None:
    assert fold_hosts(["gpu003", "gpu001", "gpu002", "gpu010"]) == "gpu[001-003,010]"


def test_fold_host_ranks() -> None:
    local = [(f"n{h}", r) for h in (1, 2) for r in range(4)]
    assert fold_host_ranks(local) == "n[1-2]:[0-3]"
    assert fold_host_ranks([*local, ("n3", 0)]) == "n3:0 n[1-2]:[0-3]"
    assert fold_host_ranks([("node001", 0), ("node001", 1), ("node002", 2), ("node002", 4)]) == (
        "0-2,4 on node[001-002]"  # global ranks: no rank on two hosts
    )
    assert fold_host_ranks([(None, 5), (None, 3), (None, 4), ("n1", 0)]) == "3-5 n1:0"
    assert fold_host_ranks([]) == ""


@given(
    st.dictionaries(
        st.sampled_from(["gpu01", "gpu02", "gpu10", "login"]), st.sets(st.integers(0, 9), min_size=1)
    )
)
def test_fold_host_ranks_expands_back(ranks_by_host: dict[str, set[int]]) -> None:
    pairs = {(host, rank) for host, ranks in ranks_by_host.items() for rank in ranks}
    folded = fold_host_ranks(sorted(pairs))
    if " on " in folded:  # global ranks: the ranks, and the hosts they run on
        ranks, hosts = folded.split(" on ")
        assert set(RangeSet(ranks)) == {str(rank) for _host, rank in pairs}
        assert set(NodeSet(hosts)) == set(ranks_by_host)
        return
    expanded = set()
    for part in folded.split():
        hosts, ranks = part.rsplit(":", 1)
        expanded |= {(host, int(rank)) for host in NodeSet(hosts) for rank in RangeSet(ranks.strip("[]"))}
    assert expanded == pairs


def test_a_rank_set_reads_folds_iterates_and_compares() -> None:
    from rankscope.folding import RankSet

    ranks = RankSet.parse("0-3,7")
    assert list(ranks) == [0, 1, 2, 3, 7] and len(ranks) == 5 and 7 in ranks and 5 not in ranks
    assert str(ranks) == "0-3,7" and ranks.phrase() == "ranks 0-3,7"
    assert RankSet.of([7, 3, 2, 1, 0, 3]) == ranks  # order and repeats do not matter
    assert RankSet.of([3]).phrase() == "rank 3" and not RankSet() and str(RankSet()) == ""
    assert sorted([RankSet.of([4]), RankSet.of([1, 2])]) == [RankSet.of([1, 2]), RankSet.of([4])]


def test_a_rank_set_in_json_is_its_list_and_reads_back() -> None:
    from rankscope.folding import RankSet
    from rankscope.serial import from_json, to_json

    data = to_json(RankSet.parse("2,0-1"))
    assert data == {"ranks": [0, 1, 2]}
    assert from_json(RankSet, data) == RankSet.of([0, 1, 2])


def test_a_rank_set_that_is_not_one_is_a_value_error() -> None:
    from rankscope.folding import RankSet

    with pytest.raises(ValueError, match="not a rank set"):
        RankSet.parse("3-x")


def test_ranks_are_named_through_rank_set_everywhere() -> None:
    """No room words "rank"/"ranks" with a fold or a list of its own (RankSet.phrase says it once)."""
    import re
    from pathlib import Path

    hand_written = re.compile(
        r"""['"]ranks?['"] if len|rank\{['"]s['"] if [^}]*\} \{|ranks? \{fold_ints"""
        r"""|ranks? \{['"], ['"]\.join\((?:map\(str|str\()|\(['"]ranks? ['"] if|fold_ints\([^)]*rank"""
    )
    package = Path(__file__).resolve().parents[1] / "src" / "rankscope"
    found = [
        f"{path.relative_to(package)}:{number}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "folding.py"  # where RankSet says it
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if hand_written.search(line)
    ]
    assert not found, "\n".join(found)
