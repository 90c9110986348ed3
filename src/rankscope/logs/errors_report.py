"""`logs errors`: drive the traceback collector over the sources, then render the groups."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.folding import fold_ints
from rankscope.logs.grouping import ErrorGroup, ErrorsReport, Grouper, normalise_message
from rankscope.logs.labels import fold_label_hosts, fold_labels, host_and_rank, label_text
from rankscope.logs.reading import Reading
from rankscope.logs.sources import ReadSummary
from rankscope.logs.torchrun_summary import RankExit, find_summaries
from rankscope.logs.tracebacks import HEADER, FrameLine, RankTraceback, TracebackCollector

#: An exception line at the start of a line: "ValueError: x", "torch.OutOfMemoryError: y", "KeyboardInterrupt".
_EXCEPTION_LINE = re.compile(
    rb"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure)(?::[^\n]*)?)$", re.M
)

PREFIX_ADVICE = (
    "add rank prefixes at the source: torchrun --role $(hostname -s): --tee 3, srun --label, "
    "mpirun --tag-output, or rankscope prefix -- CMD"
)


@dataclass
class LineCounts:
    lines: int = 0
    #: Lines that do not start with a bracket prefix (counted on bracket-prefixed sources only).
    unprefixed: int = 0
    tracebacks: int = 0
    truncated: int = 0
    #: torchrun's failure summary entries (launcher view: exit codes, root cause).
    exits: list[RankExit] = field(default_factory=list)
    #: In sources without rank prefixes: every exception line (``Name: message``, the message
    #: normalised as it is counted, so memory grows with distinct errors, not lines), so that
    #: interleaved tracebacks whose headers or frames got mixed still show their errors.
    exception_lines: Counter[str] = field(default_factory=Counter)


def scan_errors(reading: Reading) -> tuple[ErrorsReport, LineCounts]:
    grouper = Grouper()
    collector = TracebackCollector(sink=grouper.add)
    counts = LineCounts()
    for opened in reading.sources():
        labels = opened.labels
        collector.start_source(opened.source.name, labels)
        # Counted on bracket-prefixed sources only (not torchrun log dirs nor srun --label output).
        bracketed = labels.fixed_label is None and not labels.allow_srun
        unprefixed_source: Optional[bool] = None
        for chunk in opened.chunks:
            lines = chunk.count(b"\n")
            counts.lines += lines
            if unprefixed_source is None:
                unprefixed_source = bracketed and chunk.count(b"\n[") < max(1, lines // 10)
            if unprefixed_source:
                for line in _EXCEPTION_LINE.findall(chunk):
                    # normalised as it is counted: memory grows with distinct errors, not lines
                    counts.exception_lines[
                        _normalised_line(line.rstrip(b"\r").decode("utf-8", "replace"))
                    ] += 1
            if bracketed:
                counts.unprefixed += lines - opened.bracketed_lines(chunk)
            collector.feed(chunk)
            if opened.continues:  # a later piece of a line longer than MAX_LINE
                collector.continued_line()
                counts.lines -= 1
            if b"Failures:" in chunk or b"Root Cause (first" in chunk:
                counts.exits.extend(find_summaries(chunk))
        collector.finish()
    counts.tracebacks = grouper.count
    counts.truncated = grouper.truncated
    return grouper.report(), counts


def _where(tb: RankTraceback) -> str:
    return f"{label_text(tb.label) or '(no rank prefix)'} ({tb.source} line {tb.line_number})"


def _render_group(
    group: ErrorGroup,
    index: int,
    total: int,
    frames: int,
    first: Optional[RankTraceback],
    title: str = "error",
) -> list[str]:
    labels = group.labels
    ranks = fold_labels(labels)
    kind = "" if index == 1 or title != "error" else "minority, "
    is_first = first is not None and group.example is first
    head = f"{title} {index} of {total} — {kind}{len(labels)} rank(s): {ranks}"
    global_ranks = group.global_ranks
    numbers = sorted({n for n in (host_and_rank(label)[1] for label in labels if label) if n is not None})
    if global_ranks is not None and global_ranks != fold_ints(numbers):
        head += f" (torch global ranks {global_ranks})"
    if title != "error":
        head = f"{title} {index} of {total} (no rank prefix: the launcher, or unprefixed output)"
    if group.count != len(labels):
        head += f"  ({group.count} tracebacks)"
    if is_first:
        head += "  <- first to fail"
    out = [head]
    example = group.example
    for chained in example.chained:
        out.append(f"    (while handling: {chained})")
    shown = example.frames[-frames:] if frames > 0 else []
    if len(example.frames) > len(shown):
        out.append(f"    ... {len(example.frames) - len(shown)} outer frame(s)")
    for frame in shown:
        out.append(f'    File "{frame.filename}", line {frame.line}, in {frame.function}')
        if frame.code:
            out.append(f"      {frame.code}")
    if example.truncated:
        out.append("    (traceback cut off: no exception line followed; the log may end early)")
    else:
        out.append(f"  {example.exception}")
    if group.messages_vary:
        out.append(
            "  (message differs between ranks; common form: "
            f"{group.exception_type}: {group.normalised_message})"
        )
    out.append(f"  first seen: {_where(group.example)}")
    return out


def render_errors(report: ErrorsReport, counts: LineCounts, frames: int, notes: list[str]) -> str:
    out: list[str] = []
    groups = report.groups
    if not groups:
        out.append(f"no complete Python traceback (no '{HEADER.decode()}' line) in {counts.lines} lines")
    else:
        all_labels = {label for g in groups for label in g.labels}
        launcher = f" + {len(report.unprefixed)} without a rank prefix" if report.unprefixed else ""
        out.append(
            f"{len(groups)} distinct error(s) from {len(all_labels)} rank(s){launcher} "
            f"({counts.tracebacks} tracebacks in {counts.lines} lines)"
        )
        if report.first_failure is not None:
            out.append(f"first to fail (log order): {_where(report.first_failure)}")
        by_time = report.first_by_time
        if by_time is not None and by_time is not report.first_failure:
            out.append(
                f"first to fail (by timestamp): {_where(by_time)} at {by_time.time} "
                "(the last time that rank logged before its traceback)"
            )
        for index, group in enumerate(groups, 1):
            out.append("")
            out.extend(_render_group(group, index, len(groups), frames, report.first_failure))
        for index, group in enumerate(report.unprefixed, 1):
            out.append("")
            out.extend(
                _render_group(
                    group, index, len(report.unprefixed), min(frames, 2), None, title="launcher error"
                )
            )
    out.extend(_render_exception_lines(counts))
    out.extend(_render_exits(counts.exits))
    if counts.truncated:
        out.append(f"\nnote: {counts.truncated} traceback(s) had no exception line (cut off or interleaved)")
    prefixed = counts.lines - counts.unprefixed
    if counts.lines and counts.unprefixed == counts.lines:
        out.append(
            f"note: no line has a rank prefix, so interleaved tracebacks cannot be separated; {PREFIX_ADVICE}"
        )
    elif counts.unprefixed and prefixed:
        out.append(
            f"note: {counts.unprefixed} of {counts.lines} lines carry no rank prefix "
            "(launcher output, or unparsed)"
        )
    out.extend(f"note: {note}" for note in notes)
    return "\n".join(out)


def _normalised_line(line: str) -> str:
    name, _, message = line.partition(":")
    return f"{name}: {normalise_message(message.strip())}" if message else name


def _orphan_exception_lines(counts: LineCounts) -> list[tuple[str, int]]:
    """Exception lines, normalised and counted, when they outnumber the rebuilt tracebacks."""
    grouped = counts.exception_lines
    if sum(grouped.values()) <= counts.tracebacks:
        return []
    return grouped.most_common()


def _render_exception_lines(counts: LineCounts) -> list[str]:
    rows = _orphan_exception_lines(counts)
    if not rows:
        return []
    out = ["", "exception lines in the unprefixed log (more than the tracebacks that could be rebuilt):"]
    out.extend(f"  {count:>6}x  {line}" for line, count in rows[:20])
    if len(rows) > 20:
        out.append(f"  ... {len(rows) - 20} more distinct lines (--json has them all)")
    return out


def _render_exits(exits: list[RankExit]) -> list[str]:
    if not exits:
        return []
    out = [""]
    for root in (e for e in exits if e.root_cause):
        out.append(
            f"torchrun's root cause (first failure it observed): rank {root.rank} on {root.host} ({root.how})"
        )
    by_how: dict[str, set[int]] = {}
    for entry in exits:
        by_how.setdefault(entry.how, set()).add(entry.rank)
    listed = "; ".join(
        f"{how}: {fold_labels([str(r).encode() for r in sorted(ranks)])}"
        for how, ranks in sorted(by_how.items())
    )
    out.append(f"torchrun's failure summary: {listed}")
    return out


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


@dataclass
class ExceptionLineCount:
    exception: str
    count: int


@dataclass
class ErrorsDocument:
    """``rankscope.logs.errors``: each distinct error once, the first to fail, torchrun's summary."""

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
    read: ReadSummary = field(default_factory=ReadSummary)


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
    )


def errors_document(report: ErrorsReport, counts: LineCounts) -> ErrorsDocument:
    first, by_time = report.first_failure, report.first_by_time
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
        minority=list(range(1, len(report.groups))),
        unprefixed_groups=[_entry(group) for group in report.unprefixed],
        lines=counts.lines,
        unprefixed_lines=counts.unprefixed,
        tracebacks=counts.tracebacks,
        truncated_tracebacks=counts.truncated,
        torchrun_failures=counts.exits,
        unprefixed_exception_lines=[
            ExceptionLineCount(line, count) for line, count in _orphan_exception_lines(counts)
        ],
    )
