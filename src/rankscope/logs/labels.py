"""Where logs meet the shared identity: a rank label read from a line (bytes) as host and rank.

Inside the scanners a label stays the bytes it was read as (``b"node7:3"``, or ``b"3"`` when the
prefix names no host): the hot loops compare and hash them without decoding. Everything that
leaves the room (reports, JSON, folded rank lists) goes through :func:`host_and_rank`, the one
reader of a label, and :func:`label_text`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Optional

from rankscope.folding import fold_host_ranks, fold_hosts

#: What a line without a rank prefix folds to.
UNPREFIXED = "-"


@lru_cache(maxsize=1 << 16)
def host_and_rank(label: bytes) -> tuple[Optional[str], Optional[int]]:
    """``b"node3:12"`` -> ``("node3", 12)``; ``b"12"`` -> ``(None, 12)``; ``b"login"`` -> ``("login", None)``.

    The reading of :func:`rankscope.model.parse_label`, except that a bare number is a rank
    without a host (launchers that do not know the host print only the rank).
    """
    host, sep, rank = label.rpartition(b":")
    if rank.isdigit():
        return (host.decode("utf-8", "replace") if sep else None, int(rank))
    return (label.decode("utf-8", "replace"), None)


def label_text(label: Optional[bytes]) -> Optional[str]:
    """A label as reports print it (invalid UTF-8 shown as U+FFFD); None for a line without a prefix."""
    return None if label is None else label.decode("utf-8", "replace")


def label_order(label: Optional[bytes]) -> tuple[int, str, int, bytes]:
    """Sort key: by host, then rank; labels without a rank before numbered ones, no prefix last."""
    if label is None:
        return (1, "", 0, b"")
    host, rank = host_and_rank(label)
    return (0, host or "", -1 if rank is None else rank, label)


def fold_labels(labels: Iterable[Optional[bytes]]) -> str:
    """``[b"n1:0", b"n1:1", b"n2:0", b"n2:1"]`` -> ``"n[1-2]:[0-1]"``; ``None`` (no prefix) -> ``-``.

    Labels with a rank fold with :func:`rankscope.folding.fold_host_ranks`; others are listed after.
    """
    ranked: list[tuple[Optional[str], int]] = []
    odd: set[str] = set()
    for label in labels:
        if label is None:
            odd.add(UNPREFIXED)
            continue
        host, rank = host_and_rank(label)
        if rank is None:
            odd.add(label.decode("utf-8", "replace"))
        else:
            ranked.append((host, rank))
    folded = fold_host_ranks(ranked)
    return " ".join([folded, *sorted(odd)] if folded else sorted(odd))


def fold_label_hosts(labels: Iterable[Optional[bytes]]) -> str:
    """The hosts the labels name, folded (``node[1-4]``); ``""`` when none names a host."""
    hosts = {host_and_rank(label)[0] for label in labels if label is not None}
    return fold_hosts(host for host in hosts if host)


_PROCESS = re.compile(r"([^,]+),pid=(\d+)")


def process_of(who: Optional[str]) -> Optional[tuple[str, int]]:
    """(host, pid) of a finding's ``who`` that names a process rather than a rank (``host,pid=N``:
    NCCL's ``host:pid:tid`` lines, Ray's raylet, faulthandler's dumps); None for any other."""
    found = _PROCESS.fullmatch(who or "")
    return (found.group(1), int(found.group(2))) if found else None
