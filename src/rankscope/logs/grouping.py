"""Group tracebacks that are the same error, so each distinct error prints once.

Two tracebacks are the same error when their exception type, their message with the
varying parts normalised (numbers, addresses, IPs, host names, site-packages paths) and
their frames (file and function, not line numbers: nodes may run different patch versions
of a library) agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ClusterShell.RangeSet import RangeSet

from rankscope.logs.folding import fold_hosts, fold_labels
from rankscope.logs.prefixes import host_and_rank
from rankscope.logs.timestamps import sortable
from rankscope.logs.tracebacks import FrameLine, RankTraceback
from rankscope.model import short_path

_HEX = re.compile(r"0x[0-9a-fA-F]+")
_IP = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b")
_NUMBER = re.compile(r"\d+")
_SITE = re.compile(r"[^\s'\"(),\[\]]*/(?:site|dist)-packages/")
_TMP = re.compile(r"/tmp/[^\s'\"(),\[\]]*")


def normalise_message(message: str, hosts: Sequence[str] = ()) -> str:
    """Replace the parts of an error message that differ between ranks of the same error."""
    for host in sorted(hosts, key=len, reverse=True):
        if host:
            message = re.sub(rf"\b{re.escape(host)}\b", "<host>", message)
    message = _SITE.sub("", message)
    message = _TMP.sub("<tmp>", message)
    message = _HEX.sub("<addr>", message)
    message = _IP.sub("<ip>", message)
    return _NUMBER.sub("<n>", message)


def frame_key(frame: FrameLine) -> tuple[str, str]:
    return (short_path(frame.filename) if "-packages/" in frame.filename else frame.filename, frame.function)


@dataclass
class ErrorGroup:
    """One distinct error and every rank that raised it."""

    exception_type: str
    normalised_message: str
    example: RankTraceback
    members: list[RankTraceback]

    @property
    def labels(self) -> list[Optional[bytes]]:
        seen: dict[Optional[bytes], None] = {}
        for tb in self.members:
            seen.setdefault(tb.label, None)
        return list(seen)

    @property
    def global_ranks(self) -> Optional[str]:
        """torch's global ranks of the members, folded, when every traceback carried one."""
        ranks = {tb.global_rank for tb in self.members}
        if None in ranks:
            return None
        return str(RangeSet.fromlist([str(r) for r in sorted(r for r in ranks if r is not None)]))

    @property
    def first(self) -> RankTraceback:
        return min(self.members, key=lambda tb: tb.order)

    @property
    def messages_vary(self) -> bool:
        return len({tb.exception for tb in self.members}) > 1

    def to_dict(self) -> dict[str, Any]:
        example = self.example
        return {
            "exception_type": self.exception_type,
            "message": example.message,
            "normalised_message": self.normalised_message,
            "messages_vary": self.messages_vary,
            "count": len(self.members),
            "ranks": fold_labels(self.labels),
            "labels": [_label_str(label) for label in self.labels],
            "hosts": fold_hosts(self.labels),
            "global_ranks": self.global_ranks,
            "first": _where(self.first),
            "truncated": example.truncated,
            "chained": list(example.chained),
            "frames": [
                {"filename": f.filename, "line": f.line, "function": f.function, "code": f.code}
                for f in example.frames
            ],
        }


@dataclass
class ErrorsReport:
    #: Errors of ranks (or of everything, when no line had a rank prefix), biggest group first.
    groups: list[ErrorGroup]
    first_failure: Optional[RankTraceback]
    #: Errors printed without a rank prefix in an otherwise prefixed log: usually the launcher's own.
    unprefixed: list[ErrorGroup] = field(default_factory=list)
    #: The traceback with the earliest timestamp, when the ranks' lines carry timestamps.
    first_by_time: Optional[RankTraceback] = None

    @property
    def majority(self) -> Optional[ErrorGroup]:
        return self.groups[0] if self.groups else None

    @property
    def minority(self) -> list[ErrorGroup]:
        return self.groups[1:]


def _label_str(label: Optional[bytes]) -> Optional[str]:
    return None if label is None else label.decode("utf-8", "replace")


def _where(tb: RankTraceback) -> dict[str, Any]:
    return {"label": _label_str(tb.label), "source": tb.source, "line": tb.line_number}


def group_tracebacks(tracebacks: Iterable[RankTraceback]) -> ErrorsReport:
    """Group by (type, normalised message, frames); biggest group first, ties by first appearance.

    When some tracebacks carry a rank and others do not, the ones without are reported apart
    (``unprefixed``): in a prefixed log they are the launcher's (torchrun's ChildFailedError).
    """
    ordered = sorted(tracebacks, key=lambda tb: tb.order)
    labelled = [tb for tb in ordered if tb.label is not None]
    if labelled and len(labelled) < len(ordered):
        others = [tb for tb in ordered if tb.label is None]
        report = _group(labelled)
        report.unprefixed = _group(others).groups
    else:
        report = _group(ordered)
    timed = [tb for tb in (labelled or ordered) if tb.time is not None]
    if timed:
        report.first_by_time = min(timed, key=lambda tb: (sortable(tb.time or ""), tb.order))
    return report


def _group(ordered: list[RankTraceback]) -> ErrorsReport:
    hosts = sorted({h for tb in ordered if tb.label for h in [host_and_rank(tb.label)[0]] if h})
    groups: dict[tuple[Any, ...], ErrorGroup] = {}
    for tb in ordered:
        normalised = normalise_message(tb.message, hosts)
        key = (tb.exception_type, normalised, tuple(frame_key(f) for f in tb.frames), tb.truncated)
        group = groups.get(key)
        if group is None:
            groups[key] = ErrorGroup(tb.exception_type, normalised, tb, [tb])
        else:
            group.members.append(tb)
    result = sorted(groups.values(), key=lambda g: (-len(g.labels), g.first.order))
    return ErrorsReport(result, ordered[0] if ordered else None)
