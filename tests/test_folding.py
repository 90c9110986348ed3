from __future__ import annotations

from ClusterShell.NodeSet import NodeSet
from ClusterShell.RangeSet import RangeSet
from hypothesis import given
from hypothesis import strategies as st

from rankscope.folding import describe_members, fold_hosts, fold_ints, parse_ints
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
