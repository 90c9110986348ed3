"""Group tracebacks that are the same error, so each distinct error prints once, and find the root cause.

Two tracebacks are the same error when their exception type, their message with the
varying parts normalised (numbers, addresses, IPs, host names, site-packages paths), their
frames (file and function, not line numbers: nodes may run different patch versions
of a library) and whether they were caught agree.

The root cause is the first fatal culprit (:mod:`rankscope.logs.roles`): by timestamp where the
culprits' lines carry one, else by order in the log.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from rankscope.folding import RankSet
from rankscope.logs.labels import host_and_rank, label_order
from rankscope.logs.roles import Role, maybe_victim, role_of, user_frame
from rankscope.logs.timestamps import sortable
from rankscope.logs.tracebacks import FrameLine, RankTraceback
from rankscope.model import short_path

_HEX = re.compile(r"0x[0-9a-fA-F]+")
_IP = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b")
_NUMBER = re.compile(r"\d+")
_SITE = re.compile(r"[^\s'\"(),\[\]]*/(?:site|dist)-packages/")
_TMP = re.compile(r"/tmp/[^\s'\"(),\[\]]*")


def host_pattern(hosts: Collection[str]) -> Optional[re.Pattern[str]]:
    """One regex for whole-word host names, longest first."""
    named = sorted((h for h in hosts if h), key=len, reverse=True)
    if not named:
        return None
    return re.compile(r"\b(?:" + "|".join(re.escape(h) for h in named) + r")\b")


def normalise_message(
    message: str, hosts: Collection[str] = (), pattern: Optional[re.Pattern[str]] = None
) -> str:
    """Replace the parts of an error message that differ between ranks of the same error."""
    pattern = pattern if pattern is not None else host_pattern(hosts)
    if pattern is not None:
        message = pattern.sub("<host>", message)
    message = _SITE.sub("", message)
    message = _TMP.sub("<tmp>", message)
    message = _HEX.sub("<addr>", message)
    message = _IP.sub("<ip>", message)
    return _NUMBER.sub("<n>", message)


def frame_key(frame: FrameLine) -> tuple[str, str]:
    return (short_path(frame.filename) if "-packages/" in frame.filename else frame.filename, frame.function)


@dataclass
class ErrorGroup:
    """One distinct error and every rank that raised it.

    Built one traceback at a time (:meth:`add`) and keeping only the first traceback in full,
    so memory grows with distinct errors and ranks, not with the number of tracebacks.
    """

    exception_type: str
    normalised_message: str
    example: RankTraceback
    role: Role = Role.CULPRIT
    count: int = 0
    #: The member traceback with the earliest timestamp, if any carried one.
    timed: Optional[RankTraceback] = None
    _labels: dict[Optional[bytes], None] = field(default_factory=dict)
    _exceptions: set[str] = field(default_factory=set)
    _global_ranks: set[int] = field(default_factory=set)
    _global_missing: bool = False
    #: The latest torchrun attempt (restarts before it) in which a member was raised, and how many
    #: members were raised in it (``count`` where the workers were never restarted).
    last_attempt: int = 0
    last_count: int = 0
    #: Relayed members (a CheckpointException's ``(RANK n)``): the ranks that quoted them, and how
    #: many were a further quote of an error of a rank already in the group.
    reporters: dict[Optional[bytes], None] = field(default_factory=dict)
    copies: int = 0

    def add(self, tb: RankTraceback) -> None:
        self.count += 1
        if tb.relayed:
            self.reporters.setdefault(tb.reporter, None)
            self.copies += tb.label in self._labels
        if tb.attempt > self.last_attempt:
            self.last_attempt, self.last_count = tb.attempt, 0
        if tb.attempt == self.last_attempt:
            self.last_count += 1
        self._labels.setdefault(tb.label, None)
        if len(self._exceptions) < 2:
            self._exceptions.add(tb.exception)
        if tb.global_rank is None:
            self._global_missing = True
        else:
            self._global_ranks.add(tb.global_rank)
        if tb.order < self.example.order:
            self.example = tb
        if tb.time is not None and (self.timed is None or _earlier(tb, self.timed)):
            self.timed = tb

    def absorb(self, other: ErrorGroup) -> None:
        """Take in ``other``'s members: the same error printed with fewer of its outer frames (a paste
        cut, a copy interleaved with other ranks' lines). The fuller traceback stays the example."""
        self.count += other.count
        self.copies += other.copies
        for label in other._labels:
            self._labels.setdefault(label, None)
        for reporter in other.reporters:
            self.reporters.setdefault(reporter, None)
        for exception in other._exceptions:
            if len(self._exceptions) < 2:
                self._exceptions.add(exception)
        self._global_ranks |= other._global_ranks
        self._global_missing = self._global_missing or other._global_missing
        if other.last_attempt > self.last_attempt:
            self.last_attempt, self.last_count = other.last_attempt, other.last_count
        elif other.last_attempt == self.last_attempt:
            self.last_count += other.last_count
        if other.timed is not None and (self.timed is None or _earlier(other.timed, self.timed)):
            self.timed = other.timed
        if len(other.example.frames) > len(self.example.frames):
            self.example = other.example

    def settled_attempt(self, restarts: Mapping[str, int]) -> int:
        """Its last attempt once its source was read (``restarts``: how many the source had)."""
        return min(self.last_attempt, restarts.get(self.example.source, 0))

    @property
    def labels(self) -> list[Optional[bytes]]:
        """Every label once, by host then rank."""
        return sorted(self._labels, key=label_order)

    @property
    def global_ranks(self) -> Optional[str]:
        """torch's global ranks of the members, folded, when every traceback carried one."""
        if self._global_missing or not self._global_ranks:
            return None
        return str(RankSet.of(self._global_ranks))

    @property
    def messages_vary(self) -> bool:
        return len(self._exceptions) > 1


@dataclass
class RootCause:
    """The traceback chosen as the root cause, its group, and why it was chosen."""

    traceback: RankTraceback
    group: ErrorGroup
    #: ``"timestamp"`` or ``"log order"``.
    by: str
    #: How many other fatal culprit tracebacks there were (later ones).
    other_culprits: int
    #: torchrun restarted its workers this many times in the root cause's source: the error is the
    #: attempt's that ended the job where ``first_attempt`` is set (the first culprit of the job's
    #: first attempt), else no later attempt raised one in the log.
    restarts: int = 0
    first_attempt: Optional[ErrorGroup] = None


@dataclass
class ErrorsReport:
    #: Errors of ranks (or of everything, when no line had a rank prefix): culprits, victims,
    #: handled errors; in each, most ranks first.
    groups: list[ErrorGroup]
    first_failure: Optional[RankTraceback]
    #: Errors printed without a rank prefix in an otherwise prefixed log: usually the launcher's own.
    unprefixed: list[ErrorGroup] = field(default_factory=list)
    #: The traceback with the earliest timestamp, when the ranks' lines carry timestamps.
    first_by_time: Optional[RankTraceback] = None
    root_cause: Optional[RootCause] = None


class Grouper:
    """Group tracebacks as they complete: by type, normalised message and frames.

    Tracebacks without a rank label are grouped apart; in a log where other tracebacks have a
    label they are reported as ``unprefixed`` (the launcher's own, such as torchrun's
    ChildFailedError). Host names are normalised out of messages with the hosts seen so far.
    """

    def __init__(self) -> None:
        self._groups: tuple[dict[tuple[Any, ...], ErrorGroup], dict[tuple[Any, ...], ErrorGroup]] = ({}, {})
        self._hosts: set[str] = set()
        self._host_pattern: Optional[re.Pattern[str]] = None
        self._first: list[Optional[RankTraceback]] = [None, None]
        self._first_timed: list[Optional[RankTraceback]] = [None, None]
        self.count = 0
        self.truncated = 0

    def add(self, tb: RankTraceback) -> None:
        self.count += 1
        self.truncated += tb.truncated
        if tb.truncated and not tb.frames:
            return  # a header and nothing else: no error to show (counted as cut off)
        side = 0 if tb.label is not None else 1
        if tb.label is not None:
            host = host_and_rank(tb.label)[0]
            if host and host not in self._hosts:
                self._hosts.add(host)
                self._host_pattern = host_pattern(self._hosts)
        normalised = normalise_message(tb.message, pattern=self._host_pattern)
        # a relayed traceback's frames differ with the rank that quoted it (its own call to the
        # collective is one frame more): its copies are one error where they end alike
        frames = tb.frames[-1:] if tb.relayed else tb.frames
        key = (
            tb.exception_type,
            normalised,
            tuple(frame_key(f) for f in frames),
            tb.truncated,
            tb.handled,
        )
        group = self._groups[side].get(key)
        if group is None:
            group = self._groups[side][key] = ErrorGroup(tb.exception_type, normalised, tb, role_of(tb))
        group.add(tb)
        first = self._first[side]
        if first is None or tb.order < first.order:
            self._first[side] = tb
        if tb.time is not None:
            timed = self._first_timed[side]
            if timed is None or _earlier(tb, timed):
                self._first_timed[side] = tb

    def report(self, restarts: Optional[Mapping[str, int]] = None) -> ErrorsReport:
        """The groups in report order and the root cause (``restarts``: torchrun's per source)."""
        for groups in self._groups:
            _join_cut_copies(groups)
        side = 0 if self._groups[0] else 1
        _caught_without_marker(list(self._groups[0].values()))
        if side == 0:
            _adopt_workers(self._groups, restarts or {})
        _peer_gone(list(self._groups[side].values()))
        root = root_cause(list(self._groups[side].values()), restarts)
        labelled, unlabelled = (self._sorted(groups) for groups in self._groups)
        if side == 0:
            return ErrorsReport(labelled, self._first[0], unlabelled, self._first_timed[0], root)
        return ErrorsReport(unlabelled, self._first[1], [], self._first_timed[1], root)

    @staticmethod
    def _sorted(groups: dict[tuple[Any, ...], ErrorGroup]) -> list[ErrorGroup]:
        """Culprits, then victims, then handled errors; in each, most ranks first, then log order."""
        rank = {Role.CULPRIT: 0, Role.VICTIM: 1, Role.HANDLED: 2}
        return sorted(groups.values(), key=lambda g: (rank[g.role], -len(g._labels), g.example.order))


def _join_cut_copies(groups: dict[tuple[Any, ...], ErrorGroup]) -> None:
    """Groups of one error whose frames are the innermost frames of another's (the same exception,
    message and standing): copies that lost their outer frames to a cut paste or to other ranks'
    lines are that error, not another. A complete traceback's outermost frame is where the process
    or thread began, so two different errors never differ by outer frames alone."""
    buckets: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for key in groups:
        kind, message, frames, truncated, handled = key
        if frames:
            buckets.setdefault((kind, message, truncated, handled), []).append(key)
    for keys in buckets.values():
        if len(keys) < 2:
            continue
        keys.sort(key=lambda k: -len(k[2]))  # the fullest first: the others may be its cut copies
        for short in keys[1:]:
            frames = short[2]
            full = next(
                (
                    k
                    for k in keys
                    if len(k[2]) > len(frames) and k in groups and k[2][-len(frames) :] == frames
                ),
                None,
            )
            if full is not None and short in groups:
                groups[full].absorb(groups.pop(short))


def _adopt_workers(
    groups: tuple[dict[tuple[Any, ...], ErrorGroup], dict[tuple[Any, ...], ErrorGroup]],
    restarts: Mapping[str, int],
) -> None:
    """A worker's traceback without a rank prefix in a log whose other tracebacks have one: listed with
    the ranks' errors (not as the launcher's) where it is told apart from torchrun's own.

    torch marks a rank's uncaught traceback (``[rankN]:``) from its excepthook, installed when
    ``init_process_group`` returns: without ``--tee`` a rank that fails inside it (or before it) prints
    its traceback bare. Such a traceback has a frame of the user's code (torchrun's own ``ChildFailedError``
    has none). It is a candidate root cause where it went through ``init_process_group`` or where it is
    of a later torchrun attempt than every prefixed culprit (the restarted workers failed before torch
    marked anything); one that a logger's ERROR line introduced was caught and logged: handled.
    """
    labelled, unlabelled = groups
    culprit_attempts = [g.settled_attempt(restarts) for g in labelled.values() if g.role is Role.CULPRIT]
    last_marked = max(culprit_attempts, default=-1)
    for key, group in list(unlabelled.items()):
        example = group.example
        if key in labelled or example.worker is not None or user_frame(example.frames) is None:
            continue
        if example.logged:
            if group.role is Role.CULPRIT:
                group.role = Role.HANDLED
        elif not (in_init_process_group(example) or group.settled_attempt(restarts) > last_marked):
            continue
        labelled[key] = unlabelled.pop(key)


def in_init_process_group(tb: RankTraceback) -> bool:
    """Raised inside ``torch.distributed.init_process_group`` (before torch's excepthook was installed)."""
    return any(
        f.function == "init_process_group" and f.filename.endswith("distributed_c10d.py") for f in tb.frames
    )


def _peer_gone(groups: list[ErrorGroup]) -> None:
    """NCCL errors that may be a peer's death (rankscope.logs.roles.maybe_victim) are victims when
    another culprit is in the log: the rank that died first is the likelier story."""
    maybe = [g for g in groups if g.role is Role.CULPRIT and maybe_victim(g.example)]
    if maybe and any(g.role is Role.CULPRIT and g not in maybe for g in groups):
        for group in maybe:
            group.role = Role.VICTIM


def _caught_without_marker(groups: list[ErrorGroup]) -> None:
    """A traceback whose rank wrote on after it (lines, or another traceback), and that a logger's ERROR line introduced or that
    lacks torch's marker while torch marked the log's uncaught ones (``[rankN]:``, its excepthook),
    was printed by the program: caught and logged."""
    marked = any(g.example.uncaught for g in groups)
    for group in groups:
        example = group.example
        printed = example.logged or (marked and not example.uncaught)
        lived = example.lines_after > 0 or example.followed
        if group.role is Role.CULPRIT and printed and lived:
            group.role = Role.HANDLED


def root_cause(groups: list[ErrorGroup], restarts: Optional[Mapping[str, int]] = None) -> Optional[RootCause]:
    """The first fatal culprit: the earliest by timestamp when a culprit has one, else by log order.

    Complete tracebacks first: one the log ends in the middle of is chosen only when there is
    no other culprit. Where torchrun restarted its workers, the job ended with the last attempt
    that raised: its first culprit is the root cause, and the first attempt's is kept beside it.
    """
    culprits = [g for g in groups if g.role is Role.CULPRIT and not g.example.truncated]
    culprits = culprits or [g for g in groups if g.role is Role.CULPRIT]
    if not culprits:
        return None
    others = sum(g.count - g.copies for g in culprits) - 1
    attempts = {id(g): g.settled_attempt(restarts or {}) for g in culprits}
    last = max(attempts.values())
    if not last:
        found = _first_culprit(culprits, others)
        return replace(found, restarts=(restarts or {}).get(found.traceback.source, 0))
    first = min(culprits, key=lambda g: g.example.order)
    ending = [g for g in culprits if attempts[id(g)] == last]
    found = _first_culprit(ending, sum(g.last_count for g in ending) - 1)
    return replace(found, restarts=last, first_attempt=first)


def _first_culprit(culprits: list[ErrorGroup], others: int) -> RootCause:
    """The earliest of ``culprits`` (not empty): by timestamp across sources, by order within one."""
    # A traceback's time is mostly lent by a line of its rank before it (Python prints none): when it
    # happened, at the earliest. Within one source the log's order is the order things were written,
    # so only the first culprit of each source is timed against the other sources' firsts.
    firsts: dict[str, ErrorGroup] = {}
    for group in culprits:
        source = group.example.source
        if source not in firsts or group.example.order < firsts[source].example.order:
            firsts[source] = group
    timed = [(g.example, g) for g in firsts.values() if g.example.time is not None]
    if timed and len(firsts) == 1:
        group = next(iter(firsts.values()))
        return RootCause(group.example, group, "log order", others)
    if timed:
        tb, group = min(timed, key=lambda pair: _time_key(pair[0]))
        return RootCause(tb, group, "timestamp", others)
    group = min(culprits, key=lambda g: g.example.order)
    return RootCause(group.example, group, "log order", others)


def _time_key(tb: RankTraceback) -> tuple[str, int]:
    return (sortable(tb.time or ""), tb.order)


def _earlier(tb: RankTraceback, other: RankTraceback) -> bool:
    return _time_key(tb) < _time_key(other)
