"""Fold rank, pid and host lists the way HPC people read them: ``0-3,5,7-15``, ``node[1-4,7]``.

ClusterShell (RangeSet, NodeSet) owns the notation and parses user input. Integer lists
are folded here in one O(n) pass instead: RangeSet keeps every element as a string, so
folding 100k ranks through it costs ~0.4 s a call and a report folds many such lists.
tests/test_folding.py checks that the output is exactly RangeSet's.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # `logs grep` folds nothing and starts faster without the model
    from rankscope.model import Member


def fold_ints(values: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 5]`` -> ``0-3,5``."""
    nums = sorted(set(values))
    if not nums:
        return ""
    if nums[-1] - nums[0] == len(nums) - 1:  # one run (a whole group of any size): no walk
        return f"{nums[0]}-{nums[-1]}" if len(nums) > 1 else str(nums[0])
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
    from ClusterShell.RangeSet import RangeSet

    return [int(x) for x in RangeSet(text)]


@dataclass(frozen=True, order=True)
class RankSet:
    """A set of ranks, the value every room names ranks with: read from ``0-3,7`` (:meth:`parse`),
    folded back (``str``), iterated in order, compared, and said in words (:meth:`phrase`).

    In JSON it is its sorted list (``{"ranks": [0, 1, 2, 3, 7]}`` through rankscope.serial).
    """

    ranks: tuple[int, ...] = ()

    @classmethod
    def of(cls, ranks: Iterable[int]) -> RankSet:
        return cls(tuple(sorted(set(ranks))))

    @classmethod
    def parse(cls, text: str) -> RankSet:
        """``0-3,7`` (ClusterShell's range syntax); ValueError when it is not one."""
        from ClusterShell.RangeSet import RangeSetParseError

        try:
            return cls.of(parse_ints(text))
        except RangeSetParseError as exc:
            raise ValueError(f"not a rank set: {text!r} ({exc})") from None

    def __iter__(self) -> Iterator[int]:
        return iter(self.ranks)

    def __len__(self) -> int:
        return len(self.ranks)

    def __contains__(self, rank: object) -> bool:
        return rank in self.ranks

    def __str__(self) -> str:
        return fold_ints(self.ranks)

    def phrase(self) -> str:
        """``rank 3`` or ``ranks 0-3,7``."""
        return f"{'ranks' if len(self.ranks) > 1 else 'rank'} {self}"


_HOST = re.compile(r"^([^\d,\[\]]*?)(\d+)([^\d,\[\]]*)$")


def _fold_padded(numbers: list[str]) -> str:
    """Digit strings of one width (zero padding kept) -> ``001-004,007``."""
    width = len(numbers[0])
    pieces = []
    values = sorted({int(n) for n in numbers})
    start = prev = values[0]
    for value in [*values[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        pieces.append(f"{start:0{width}d}" + (f"-{prev:0{width}d}" if prev != start else ""))
        if value is not None:
            start = prev = value
    return ",".join(pieces)


def fold_hosts(hosts: Iterable[str]) -> str:
    """``gpu001 gpu002 gpu003 gpu010`` -> ``gpu[001-003,010]`` (ClusterShell NodeSet notation).

    Names shaped ``prefix<digits>suffix`` with one digit width per prefix are folded here in
    one pass (NodeSet parses each name: 0.4 s for 12k hosts); anything else goes to NodeSet.
    """
    unique = set(hosts)
    if len(unique) <= 1:  # one node: nothing to fold
        return next(iter(unique), "")
    patterns: dict[tuple[str, str], list[str]] = {}
    others: list[str] = []
    for host in unique:
        match = _HOST.match(host)
        if match is None:
            others.append(host)
        else:
            patterns.setdefault((match.group(1), match.group(3)), []).append(match.group(2))
    folded: list[str] = []
    for (prefix, suffix), numbers in patterns.items():
        widths = {len(n) for n in numbers}
        padded = any(n.startswith("0") and len(n) > 1 for n in numbers)
        if len(numbers) == 1:
            folded.append(f"{prefix}{numbers[0]}{suffix}")
        elif len(widths) == 1 or not padded:
            if len(widths) == 1:
                body = _fold_padded(numbers)
            else:
                body = fold_ints(int(n) for n in numbers)
            folded.append(f"{prefix}[{body}]{suffix}")
        else:
            others.extend(f"{prefix}{n}{suffix}" for n in numbers)
    if not others and len(folded) <= 1:
        return folded[0] if folded else ""
    # Several patterns (or odd names): let NodeSet order and merge them, from few items.
    from ClusterShell.NodeSet import NodeSet  # imported here: start-up time matters

    return str(NodeSet.fromlist(sorted(folded + others)))


def fold_host_ranks(pairs: Iterable[tuple[Optional[str], int]]) -> str:
    """Ranks where they run, folded the way rank labels (``host:rank``) read.

    Hosts with the same ranks fold together (``n[1-2]:[0-1]``, local ranks); when no rank is on
    two hosts they are global ranks and read better as one range (``0-6,8-511 on node[000-063]``).
    A rank without a host (``None``) is folded alone: ``0-3``.
    """
    hosted: dict[str, set[int]] = defaultdict(set)
    unhosted: set[int] = set()
    for host, rank in pairs:
        (unhosted if host is None else hosted[host]).add(rank)
    parts = [fold_ints(unhosted)] if unhosted else []
    if len(hosted) > 1:
        numbers = [rank for ranks in hosted.values() for rank in ranks]
        if len(numbers) == len(set(numbers)):
            return " ".join([*parts, f"{fold_ints(numbers)} on {fold_hosts(hosted)}"])
    by_ranks: dict[str, list[str]] = defaultdict(list)
    for host, ranks in hosted.items():
        by_ranks[fold_ints(ranks)].append(host)
    for folded, hosts in sorted(by_ranks.items(), key=lambda item: fold_hosts(item[1])):
        ranks_part = f"[{folded}]" if ("," in folded or "-" in folded) else folded
        parts.append(f"{fold_hosts(hosts)}:{ranks_part}")
    return " ".join(parts)


def describe_members(members: Sequence[Member], with_hosts: bool = False) -> str:
    """``ranks 0-1,3`` / ``rank 2`` / ``pids 41,57`` (+ `` on node[1-2]`` across hosts)."""
    ranks = [m.rank for m in members if m.rank is not None]
    pids = [m.pid for m in members if m.rank is None]
    parts = []
    if ranks:
        parts.append(RankSet.of(ranks).phrase())
    if pids:
        parts.append(("pid " if len(pids) == 1 else "pids ") + fold_ints(pids))
    text = " + ".join(parts) or "nobody"
    if with_hosts:
        text += " on " + fold_hosts(m.host for m in members)
    return text


def duration(seconds: float) -> str:
    """Seconds as a person reads them, without the unit: ``0.149147`` -> ``0.15``, ``12.34`` -> ``12.3``.

    Two decimals under 10 s, one under 100 s, whole seconds above; trailing zeros dropped (``2``, ``2.5``).
    """
    digits = 2 if seconds < 10 else 1 if seconds < 100 else 0
    text = f"{seconds:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
