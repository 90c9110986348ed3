"""The ``rankscope.logs.errors/1`` document: each distinct error once with its role, the root cause and
why, torchrun's summary, the evidence weighed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.errors import ErrorReport
from rankscope.evidence import Finding
from rankscope.logs.analyse import launcher_of, orphan_exception_lines, root_reason
from rankscope.logs.collect import LineCounts
from rankscope.logs.cuda import DeviceAssert, OutOfMemory, is_async_cuda_error, out_of_memory, rerun_command
from rankscope.logs.grouping import ErrorGroup, ErrorsReport
from rankscope.logs.labels import fold_label_hosts, fold_labels, label_text
from rankscope.logs.nccl_reason import NcclReason, nccl_reason
from rankscope.logs.roles import Role, where_frame
from rankscope.logs.sources import ReadSummary
from rankscope.logs.torchrun_summary import RankExit
from rankscope.logs.tracebacks import FrameLine
from rankscope.serial import OMIT_NONE


@dataclass
class Place:
    """Where a traceback starts: the rank's label (None without a prefix), the source, the line."""

    label: Optional[str]
    source: str
    line: int


@dataclass
class FirstFailure:
    label: Optional[str]
    source: str
    line: int
    exception: str


@dataclass
class FirstFailureByTime:
    label: Optional[str]
    source: str
    line: int
    #: The last timestamp the rank wrote before its traceback, as written.
    time: Optional[str]
    exception: str


@dataclass
class ErrorEntry:
    """One distinct error: the first traceback in full, and every rank that raised it."""

    exception_type: str
    message: str
    normalised_message: str
    messages_vary: bool
    count: int
    #: The ranks folded (``vm:[0-2,4-7]``); ``labels`` lists them one by one.
    ranks: str
    labels: list[Optional[str]]
    hosts: str
    global_ranks: Optional[str]
    first: Place
    truncated: bool
    chained: list[str]
    frames: list[FrameLine]
    #: ``culprit`` (a candidate root cause), ``victim`` (a consequence of another rank's failure),
    #: ``handled`` (caught: the rank kept writing).
    role: Role = Role.CULPRIT
    #: torch's note that a CUDA error is reported asynchronously (the frames may be wrong).
    cuda_async: bool = False
    out_of_memory: Optional[OutOfMemory] = None
    #: NCCL's own error name and ``Last error:`` detail after a DistBackendError (docs/logs.md).
    nccl: Optional[NcclReason] = field(default=None, metadata=OMIT_NONE)


@dataclass
class RootCauseEntry:
    """The first fatal culprit, and why it was chosen."""

    #: Index into ``groups``.
    group: int
    label: Optional[str]
    #: torch's global rank of that traceback (its ``[rankN]:`` marker), if it carried one.
    global_rank: Optional[int]
    #: Every rank of the group: folded labels, and torch's global ranks where every traceback had one.
    ranks: str
    global_ranks: Optional[str]
    exception: str
    #: The innermost frame of the user's own code (not torch, site-packages or the standard library).
    where: Optional[str]
    function: Optional[str]
    source: str
    line: int
    time: Optional[str]
    #: ``timestamp`` or ``log order``.
    chosen_by: str
    reason: str
    #: A CUDA error reported asynchronously: ``where`` may not be the faulty kernel's launch.
    location_unreliable: bool
    rerun: Optional[str]


@dataclass
class ExceptionLineCount:
    exception: str
    count: int


@dataclass
class ErrorsDocument:
    """``rankscope.logs.errors``: the root cause, each distinct error once with its role, torchrun's summary."""

    SCHEMA: ClassVar[str] = "rankscope.logs.errors/1"

    groups: list[ErrorEntry]
    first_failure: Optional[FirstFailure]
    first_failure_by_time: Optional[FirstFailureByTime]
    #: Indexes into ``groups`` of the errors fewer ranks raised than the first.
    minority: list[int]
    unprefixed_groups: list[ErrorEntry]
    lines: int
    unprefixed_lines: int
    tracebacks: int
    truncated_tracebacks: int
    torchrun_failures: list[RankExit]
    unprefixed_exception_lines: list[ExceptionLineCount]
    root_cause: Optional[RootCauseEntry] = None
    device_asserts: list[DeviceAssert] = field(default_factory=list)
    #: The root cause weighed over every kind of evidence (docs/logs.md, precedence), and the evidence.
    verdict: Optional[Finding] = None
    #: NCCL's own reason for the verdict's error, when it is a DistBackendError that NCCL explained.
    verdict_nccl: Optional[NcclReason] = field(default=None, metadata=OMIT_NONE)
    findings: list[Finding] = field(default_factory=list)
    read: ReadSummary = field(default_factory=ReadSummary)
    #: The error the verb ends with, when it printed what it found and still failed.
    error: Optional[ErrorReport] = field(default=None, metadata=OMIT_NONE)


def _entry(group: ErrorGroup) -> ErrorEntry:
    example = group.example
    labels = group.labels
    return ErrorEntry(
        exception_type=group.exception_type,
        message=example.message,
        normalised_message=group.normalised_message,
        messages_vary=group.messages_vary,
        count=group.count,
        ranks=fold_labels(labels),
        labels=[label_text(label) for label in labels],
        hosts=fold_label_hosts(labels),
        global_ranks=group.global_ranks,
        first=Place(label_text(example.label), example.source, example.line_number),
        truncated=example.truncated,
        chained=list(example.chained),
        frames=list(example.frames),
        role=group.role,
        cuda_async=is_async_cuda_error(example),
        out_of_memory=out_of_memory(example),
        nccl=nccl_reason(example.tail) or None,
    )


def _root_entry(report: ErrorsReport, counts: LineCounts) -> Optional[RootCauseEntry]:
    root = report.root_cause
    if root is None:
        return None
    tb, group = root.traceback, root.group
    frame = where_frame(tb.frames)
    unreliable = is_async_cuda_error(tb)
    return RootCauseEntry(
        group=report.groups.index(group),
        label=label_text(tb.label),
        global_rank=tb.global_rank,
        ranks=fold_labels(group.labels),
        global_ranks=group.global_ranks,
        exception=tb.exception or tb.exception_type,
        where=f"{frame.filename}:{frame.line}" if frame is not None else None,
        function=frame.function if frame is not None else None,
        source=tb.source,
        line=tb.line_number,
        time=tb.time,
        chosen_by=root.by,
        reason=root_reason(report, root),
        location_unreliable=unreliable,
        rerun=rerun_command(tb, launcher_of(counts, report)) if unreliable else None,
    )


def errors_document(report: ErrorsReport, counts: LineCounts) -> ErrorsDocument:
    first, by_time, verdict = report.first_failure, report.first_by_time, counts.verdict
    return ErrorsDocument(
        groups=[_entry(group) for group in report.groups],
        first_failure=None
        if first is None
        else FirstFailure(label_text(first.label), first.source, first.line_number, first.exception),
        first_failure_by_time=None
        if by_time is None
        else FirstFailureByTime(
            label_text(by_time.label), by_time.source, by_time.line_number, by_time.time, by_time.exception
        ),
        minority=_minority(report.groups),
        unprefixed_groups=[_entry(group) for group in report.unprefixed],
        lines=counts.lines,
        unprefixed_lines=counts.unprefixed,
        tracebacks=counts.tracebacks,
        truncated_tracebacks=counts.truncated,
        torchrun_failures=counts.exits,
        unprefixed_exception_lines=[
            ExceptionLineCount(line, count) for line, count in orphan_exception_lines(counts)
        ],
        root_cause=_root_entry(report, counts),
        device_asserts=counts.device_asserts,
        verdict=counts.verdict,
        verdict_nccl=None
        if verdict is None
        else counts.nccl_reasons.get((verdict.source, verdict.line)) or None,
        findings=counts.findings,
    )


def _minority(groups: list[ErrorGroup]) -> list[int]:
    """Indexes of the errors fewer ranks raised than the most common one."""
    most = max((len(g.labels) for g in groups), default=0)
    return [i for i, g in enumerate(groups) if len(g.labels) < most]
