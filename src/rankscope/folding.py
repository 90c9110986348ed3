"""Fold rank, pid and host lists the way HPC people read them: ``0-3,5,7-15``, ``node[1-4,7]``.

ClusterShell (RangeSet, NodeSet) owns the notation and parses user input. Integer lists
are folded here in one O(n) pass instead: RangeSet keeps every element as a string, so
folding 100k ranks through it costs ~0.4 s a call and a report folds many such lists.
tests/test_folding.py checks that the output is exactly RangeSet's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ClusterShell.NodeSet import NodeSet
from ClusterShell.RangeSet import RangeSet

from rankscope.stacks.report import Member


def fold_ints(values: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 5]`` -> ``0-3,5``."""
    nums = sorted(set(values))
    if not nums:
        return ""
    pieces = []
    start = prev = nums[0]
    for value in nums[1:]:
        if value != prev + 1:
            pieces.append(f"{start}-{prev}" if prev != start else str(start))
            start = value
        prev = value
    pieces.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(pieces)


def parse_ints(text: str) -> list[int]:
    """``0-3,5`` -> ``[0, 1, 2, 3, 5]`` (ClusterShell syntax)."""
    return [int(x) for x in RangeSet(text)]


def fold_hosts(hosts: Iterable[str]) -> str:
    return str(NodeSet.fromlist(sorted(set(hosts))))


def describe_members(members: Sequence[Member], with_hosts: bool = False) -> str:
    """``ranks 0-1,3`` / ``rank 2`` / ``pids 41,57`` (+ `` on node[1-2]`` across hosts)."""
    ranks = [m.rank for m in members if m.rank is not None]
    pids = [m.pid for m in members if m.rank is None]
    parts = []
    if ranks:
        unique = set(ranks)
        parts.append(("rank " if len(unique) == 1 else "ranks ") + fold_ints(unique))
    if pids:
        parts.append(("pid " if len(pids) == 1 else "pids ") + fold_ints(pids))
    text = " + ".join(parts) or "nobody"
    if with_hosts:
        text += " on " + fold_hosts(m.host for m in members)
    return text
