"""Fold rank labels into the ranges HPC people read: ``node[1-2]:[0-7]``, ``0-3,5``.

The notation is ClusterShell's; :mod:`rankscope.folding` does the folding (same output, one pass).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Optional

from rankscope.folding import fold_hosts as fold_host_names
from rankscope.folding import fold_ints
from rankscope.logs.prefixes import host_and_rank

UNPREFIXED = "-"


def fold_labels(labels: Iterable[Optional[bytes]]) -> str:
    """``[b"n1:0", b"n1:1", b"n2:0", b"n2:1"]`` -> ``"n[1-2]:[0-1]"``; ``None`` (no prefix) -> ``-``."""
    by_host: dict[Optional[str], set[int]] = defaultdict(set)
    odd: set[str] = set()
    for label in labels:
        if label is None:
            odd.add(UNPREFIXED)
            continue
        host, rank = host_and_rank(label)
        if rank is None:
            odd.add(label.decode("utf-8", "replace"))
        else:
            by_host[host].add(rank)
    hosts_with_ranks = [h for h in by_host if h is not None]
    if len(hosts_with_ranks) > 1:
        numbers = [r for h in hosts_with_ranks for r in by_host[h]]
        if len(numbers) == len(set(numbers)):
            # Global ranks: one range reads better than a list per host ("0-6,8-511 on node[000-063]").
            folded = fold_ints(numbers)
            bare = [fold_ints(by_host[None])] if None in by_host else []
            return " ".join([*bare, f"{folded} on {fold_host_names(hosts_with_ranks)}", *sorted(odd)])
    # Hosts with the same rank set fold together: node[1-4]:[0-7].
    by_ranks: dict[str, list[str]] = defaultdict(list)
    parts: list[str] = []
    for host, ranks in by_host.items():
        folded = fold_ints(ranks)
        if host is None:
            parts.append(folded)
        else:
            by_ranks[folded].append(host)
    for folded, hosts in sorted(by_ranks.items(), key=lambda item: fold_host_names(item[1])):
        ranks_part = f"[{folded}]" if ("," in folded or "-" in folded) else folded
        parts.append(f"{fold_host_names(hosts)}:{ranks_part}")
    parts.extend(sorted(odd))
    return " ".join(parts)


def fold_hosts(labels: Iterable[Optional[bytes]]) -> str:
    hosts = {host_and_rank(label)[0] for label in labels if label is not None}
    named = [h for h in hosts if h]
    return fold_host_names(named) if named else ""
