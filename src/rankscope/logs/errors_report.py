"""`logs errors`: drive the traceback collector over the sources, then render the groups."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.errors import ErrorReport
from rankscope.evidence import Finding, Kind, decide
from rankscope.folding import RankSet
from rankscope.logs.cuda import (
    DeviceAssert,
    DeviceAsserts,
    OutOfMemory,
    is_async_cuda_error,
    out_of_memory,
    rerun_command,
)
from rankscope.logs.grouping import ErrorGroup, ErrorsReport, Grouper, RootCause, normalise_message
from rankscope.logs.labels import fold_label_hosts, fold_labels, host_and_rank, label_text
from rankscope.logs.line_evidence import ELSEWHERE_STEP, KILLED_STEP, LineEvidence, signal_cause
from rankscope.logs.prefixes import tally_lines
from rankscope.logs.reading import Reading
from rankscope.logs.roles import Role, user_frame
from rankscope.logs.sources import ReadSummary
from rankscope.logs.torchrun_summary import RankExit, find_summaries
from rankscope.logs.tracebacks import HANDLED_LINES, HEADER, FrameLine, RankTraceback, TracebackCollector
from rankscope.serial import OMIT_NONE

#: An exception line at the start of a line: "ValueError: x", "torch.OutOfMemoryError: y", "KeyboardInterrupt".
_EXCEPTION_LINE = re.compile(
    rb"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure)(?::[^\n]*)?)$", re.M
)

#: Tracebacks per rank kept to tell its exception lines from those of its tracebacks (the evidence
#: keeps a rank's first few exception lines; these are its first tracebacks').
TRACED_PER_RANK = 16

PREFIX_ADVICE = (
    "add rank prefixes at the source: torchrun --role $(hostname -s): --tee 3, srun --label, "
    "mpirun --tag-output, or rankscope prefix -- CMD"
)


@dataclass
class LineCounts:
    lines: int = 0
    #: Lines without a rank prefix (:func:`rankscope.logs.prefixes.unlabelled_lines`).
    unprefixed: int = 0
    tracebacks: int = 0
    truncated: int = 0
    #: torchrun's failure summary entries (launcher view: exit codes, root cause).
    exits: list[RankExit] = field(default_factory=list)
    #: In sources without rank prefixes: every exception line (``Name: message``, the message
    #: normalised as it is counted, so memory grows with distinct errors, not lines), so that
    #: interleaved tracebacks whose headers or frames got mixed still show their errors.
    exception_lines: Counter[str] = field(default_factory=Counter)
    #: CUDA device-side assertion lines, folded.
    device_asserts: list[DeviceAssert] = field(default_factory=list)
    #: Every piece of evidence as a finding (tracebacks, exception lines, NCCL, watchdog, launchers).
    findings: list[Finding] = field(default_factory=list)
    #: The root cause :func:`rankscope.evidence.decide` chose among them.
    verdict: Optional[Finding] = None


def scan_errors(reading: Reading) -> tuple[ErrorsReport, LineCounts]:
    grouper = Grouper()
    traced: set[tuple[Optional[bytes], str]] = set()
    per_label: Counter[Optional[bytes]] = Counter()

    def sink(tb: RankTraceback) -> None:
        # a rank's first exception lines are matched against its first tracebacks: bounded per rank
        if per_label[tb.label] < TRACED_PER_RANK:
            per_label[tb.label] += 1
            traced.add((tb.label, tb.exception))
        grouper.add(tb)

    collector = TracebackCollector(sink=sink)
    asserts = DeviceAsserts()
    counts = LineCounts()
    evidence = LineEvidence()
    sources: dict[str, int] = {}
    reading.tally_lines = True  # each window's lines counted once, for the repair and here
    for opened in reading.sources():
        labels = opened.labels
        collector.start_source(opened.source.name, labels)
        evidence.start_source(opened.source.name, labels)
        sources.setdefault(opened.source.name, len(sources))
        # Counted on bracket-prefixed sources only (not torchrun log dirs nor srun --label output).
        bracketed = labels.fixed_label is None and not labels.allow_srun
        unprefixed_source: Optional[bool] = None
        for chunk in opened.chunks:
            tally = opened.tally or tally_lines(chunk, labels)
            lines = tally.newlines
            counts.lines += lines
            if unprefixed_source is None:
                unprefixed_source = bracketed and chunk.count(b"\n[") < max(1, lines // 10)
            if unprefixed_source:
                for line in _EXCEPTION_LINE.findall(chunk):
                    # normalised as it is counted: memory grows with distinct errors, not lines
                    counts.exception_lines[
                        _normalised_line(line.rstrip(b"\r").decode("utf-8", "replace"))
                    ] += 1
            unprefixed = tally.unlabelled
            counts.unprefixed += unprefixed
            collector.feed(chunk, lines, unprefixed)
            evidence.feed(chunk, lines, unprefixed)
            asserts.feed(chunk, labels)
            if opened.continues:  # a later piece of a line longer than MAX_LINE
                collector.continued_line()
                evidence.continued_line()
                counts.lines -= 1
                counts.unprefixed -= unprefixed  # the piece is one line
            # torchrun's summary lines carry no rank prefix (unless a launcher prefixes every line)
            summary_here = unprefixed or not bracketed
            if summary_here and (b"Failures:" in chunk or b"Root Cause (first" in chunk):
                counts.exits.extend(find_summaries(chunk))
        collector.finish()
    counts.tracebacks = grouper.count
    counts.truncated = grouper.truncated
    counts.device_asserts = asserts.result()
    report = grouper.report()
    counts.findings = [
        *_traceback_findings(report, sources),
        *evidence.findings(traced),
        *_summary_findings(counts.exits),
    ]
    counts.verdict = decide(counts.findings)
    return report, counts


def _traceback_findings(report: ErrorsReport, sources: dict[str, int]) -> list[Finding]:
    """One finding per distinct error of a rank: its earliest traceback (by time, else log order)."""
    out = []
    for group in report.groups:
        tb = group.timed or group.example
        frame = user_frame(tb.frames)
        out.append(
            Finding(
                Kind.CUT_TRACEBACK if tb.truncated else Kind.TRACEBACK,
                "python_exception",
                str(group.role),
                label_text(tb.label),
                tb.exception or tb.exception_type,
                f"{frame.filename}:{frame.line}" if frame is not None else None,
                tb.source,
                tb.line_number,
                (sources.get(tb.source, 0) << 40) + tb.line_number,
                global_rank=tb.global_rank,
                time=tb.time,
                exception=tb.exception_type,
                ranks=fold_labels(group.labels),
            )
        )
    return out


def _summary_findings(exits: list[RankExit]) -> list[Finding]:
    """torchrun's failure summary: ranks killed by a signal, or failed with an exit code."""
    out = []
    for entry in exits:
        code = entry.exitcode
        killed = entry.signal is not None or (code is not None and code < 0)
        if killed:
            number = -code if code is not None and code < 0 else 0
            cause = signal_cause(number) if number else (entry.signal or "signal").lower()
            kind = Kind.LAUNCHER
            step = KILLED_STEP if cause == "sigkill" else ""
        elif code:
            cause, kind, step = "tracebacks_elsewhere", Kind.LAUNCHER_SUMMARY, ELSEWHERE_STEP
        else:
            continue
        out.append(
            Finding(
                kind,
                cause,
                "victim" if cause == "sigterm" else "culprit",
                str(entry.rank),
                f"torchrun: rank {entry.rank} on {entry.host}: {entry.how}",
                None,
                "(torchrun summary)",
                0,
                (1 << 62) + (0 if entry.root_cause else 1),
                global_rank=entry.rank,
                next_step=step,
            )
        )
    return out


def _where(tb: RankTraceback) -> str:
    return f"{label_text(tb.label) or '(no rank prefix)'} ({tb.source} line {tb.line_number})"


_ROLE_WORDS = {
    Role.CULPRIT: "culprit",
    Role.VICTIM: "victim (a consequence of another failure: lost peer, timeout, signal)",
    Role.HANDLED: f"handled (the rank wrote {HANDLED_LINES}+ more lines after it)",
}


def _launcher(counts: LineCounts, report: ErrorsReport) -> str:
    torchrun = counts.exits or any("ChildFailedError" in g.exception_type for g in report.unprefixed)
    return "torchrun ..." if torchrun else "python"


def _cuda_lines(group: ErrorGroup, launcher: str) -> list[str]:
    """CUDA facts of an error: its location's reliability, its out-of-memory numbers."""
    out = []
    example = group.example
    if is_async_cuda_error(example):
        out.append(
            "  CUDA reports kernel errors asynchronously: the line above is where the error was noticed, "
            "not necessarily where the faulty kernel was launched"
        )
        out.append(f"  rerun with synchronous launches to find it: {rerun_command(example, launcher)}")
        out.append(
            "  (or `rankscope rerun --sync --compare <this log> -- <command>`: it says where the runs disagree)"
        )
    oom = out_of_memory(example)
    if oom is not None:
        out.append(f"  CUDA out of memory: {oom.summary()}")
    return out


def _assert_lines(asserts: list[DeviceAssert], indent: str = "  ") -> list[str]:
    out = []
    for item in asserts:
        blocks = ", ".join(f"[{b}]" for b in item.blocks)
        out.append(
            f"{indent}device-side assertion, {item.threads} GPU thread(s) on {len(item.labels)} rank(s) "
            f"{item.ranks}: {item.file}:{item.line} in {item.kernel}: `{item.condition}` failed (blocks {blocks})"
        )
    return out


def _asserts_of(group: ErrorGroup, asserts: list[DeviceAssert]) -> list[DeviceAssert]:
    mine = {label_text(label) for label in group.labels}
    return [a for a in asserts if mine.intersection(a.labels)]


def _global_ranks_note(group: ErrorGroup) -> str:
    global_ranks = group.global_ranks
    numbers = sorted(
        {n for n in (host_and_rank(label)[1] for label in group.labels if label) if n is not None}
    )
    if global_ranks is not None and global_ranks != str(RankSet.of(numbers)):
        return f" (torch global {RankSet.parse(global_ranks).phrase()})"
    return ""


def _render_group(
    group: ErrorGroup,
    index: int,
    total: int,
    frames: int,
    root: Optional[RootCause],
    launcher: str,
    asserts: list[DeviceAssert],
    title: str = "error",
) -> list[str]:
    labels = group.labels
    ranks = fold_labels(labels)
    role = _ROLE_WORDS[group.role]
    if root is not None and group is root.group:
        role = "culprit, the root cause"
    if title == "error":
        head = (
            f"{title} {index} of {total} — {role}, {len(labels)} rank(s): {ranks}{_global_ranks_note(group)}"
        )
    else:
        head = f"{title} {index} of {total} — {role} (no rank prefix: the launcher, or unprefixed output)"
    if group.count != len(labels):
        head += f"  ({group.count} tracebacks)"
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
    out.extend(_cuda_lines(group, launcher))
    out.extend(_assert_lines(asserts))
    out.append(f"  first seen: {_where(group.example)}")
    return out


def _frame_text(tb: RankTraceback) -> str:
    frame = user_frame(tb.frames)
    return f" at {frame.filename}:{frame.line} in {frame.function}" if frame is not None else ""


def _root_lines(report: ErrorsReport, counts: LineCounts) -> list[str]:
    """The first lines of the report: the root cause and why, or why there is none."""
    root = report.root_cause
    if root is None:
        victims = [g for g in report.groups if g.role is Role.VICTIM]
        told = next((e for e in counts.exits if e.root_cause), None)
        launcher = (
            f"; torchrun's first observed failure: rank {told.rank} on {told.host} ({told.how})"
            if told
            else ""
        )
        if victims:
            return [
                f"root cause: not in this log — every error is a consequence of another failure "
                f"({sum(g.count for g in victims)} traceback(s) of lost peers, timeouts or signals); "
                f"the rank that failed first left no traceback here{launcher}"
            ]
        return [f"root cause: none — every traceback was caught (its rank kept writing){launcher}"]
    tb, group = root.traceback, root.group
    host, number = host_and_rank(tb.label) if tb.label is not None else (None, None)
    who = label_text(tb.label) or "(no rank prefix)"
    if host is None and number is not None:
        who = f"rank {who}"
    if tb.global_rank is not None and number != tb.global_rank:
        who += f" (global rank {tb.global_rank})"
    if len(group.labels) > 1:
        who += f" (and {len(group.labels) - 1} more rank(s) with this error: {fold_labels(group.labels)})"
    when = f"by timestamp ({tb.time})" if root.by == "timestamp" else "in log order"
    first = f"root cause: {who}: {_short_exception(tb)}{_frame_text(tb)} — the first fatal error {when}"
    out = [first, f"  why: {_reason(report, root)}"]
    if is_async_cuda_error(tb):
        out.append(
            "  location unreliable: CUDA reported this kernel error asynchronously; "
            f"rerun synchronously: {rerun_command(tb, _launcher(counts, report))}"
        )
        out.extend(_assert_lines(_asserts_of(group, counts.device_asserts)))
    return out


_KIND_WORDS = {
    Kind.NCCL: "an NCCL call of this process failed (NCCL WARN)",
    Kind.EXCEPTION_LINE: "an exception line of this rank (its traceback header is not in the log)",
    Kind.NATIVE_CRASH: "a native crash (signal backtrace)",
    Kind.LAUNCHER: "the launcher reported this process's death",
    Kind.WATCHDOG: "torch's NCCL watchdog",
    Kind.LAUNCHER_SUMMARY: "only the launcher's failure summary is in this log",
}


def verdict_lines(verdict: Finding) -> list[str]:
    """The first lines of the report when the root cause is not a traceback."""
    who = verdict.who or "(no rank named)"
    launcher = verdict.kind in (Kind.LAUNCHER, Kind.LAUNCHER_SUMMARY)  # its number may be a local rank
    if verdict.who is not None and verdict.who.isdigit() and not launcher:
        who = f"rank {who}"
    if verdict.global_rank is not None and verdict.who != str(verdict.global_rank):
        who += f" (global rank {verdict.global_rank})"
    where = f" at {verdict.where}" if verdict.where else ""
    ranks = f" (rank(s) {verdict.ranks})" if verdict.ranks and verdict.ranks != verdict.who else ""
    out = [f"root cause: {who}: {verdict.what}{where}{ranks} [{verdict.cause}]"]
    out.append(
        f"  why: {_KIND_WORDS.get(verdict.kind, str(verdict.kind))}; the strongest evidence in the log "
        f"(docs/logs.md, precedence) — {verdict.source} line {verdict.line}"
        if verdict.line
        else f"  why: {_KIND_WORDS.get(verdict.kind, str(verdict.kind))}"
    )
    if verdict.next_step:
        out.append(f"  next: {verdict.next_step}")
    return out


def _reason(report: ErrorsReport, root: RootCause) -> str:
    """Why the root cause was chosen, and what the other errors were."""
    victims = [g for g in report.groups if g.role is Role.VICTIM]
    handled = [g for g in report.groups if g.role is Role.HANDLED]
    after = []
    if victims:
        after.append(f"{sum(len(g.labels) for g in victims)} rank(s) failed as victims")
    if handled:
        after.append(f"{sum(g.count for g in handled)} caught traceback(s) set aside")
    if root.other_culprits:
        after.append(f"{root.other_culprits} other culprit traceback(s) came later")
    why = (
        "the first traceback that is neither a consequence of another rank's failure "
        "(lost peer, timeout, signal) nor caught (its rank stopped writing)"
    )
    return why + (f"; {', '.join(after)}" if after else "")


#: How much of an exception line the root cause line shows.
SHORT_EXCEPTION = 200


def _short_exception(tb: RankTraceback) -> str:
    """The exception for the root cause line: out-of-memory numbers in place of torch's long text."""
    oom = out_of_memory(tb)
    if oom is not None:
        return f"{tb.exception_type}: CUDA out of memory ({oom.summary()})"
    text = tb.exception or tb.exception_type
    return text if len(text) <= SHORT_EXCEPTION else text[: SHORT_EXCEPTION - 3] + "..."


def render_errors(report: ErrorsReport, counts: LineCounts, frames: int, notes: list[str]) -> str:
    out: list[str] = []
    groups = report.groups
    launcher = _launcher(counts, report)
    asserts = counts.device_asserts
    shown_asserts: set[int] = set()
    verdict = counts.verdict
    other = verdict is not None and verdict.kind not in (Kind.TRACEBACK, Kind.CUT_TRACEBACK)
    if verdict is not None and other:
        out.extend(verdict_lines(verdict))
    if not groups:
        out.append(f"no complete Python traceback (no '{HEADER.decode()}' line) in {counts.lines} lines")
    else:
        if not other:
            out.extend(_root_lines(report, counts))
        all_labels = {label for g in groups for label in g.labels}
        without = f" + {len(report.unprefixed)} without a rank prefix" if report.unprefixed else ""
        roles = Counter(g.role for g in groups)
        split = ", ".join(f"{roles[r]} {r}" for r in Role if roles[r])
        out.append(
            f"{len(groups)} distinct error(s) ({split}) from {len(all_labels)} rank(s){without} "
            f"({counts.tracebacks} tracebacks in {counts.lines} lines)"
        )
        for index, group in enumerate(groups, 1):
            mine = [a for a in _asserts_of(group, asserts) if id(a) not in shown_asserts]
            shown_asserts.update(id(a) for a in mine)
            out.append("")
            root = None if other else report.root_cause
            out.extend(_render_group(group, index, len(groups), frames, root, launcher, mine))
        for index, group in enumerate(report.unprefixed, 1):
            out.append("")
            out.extend(
                _render_group(
                    group,
                    index,
                    len(report.unprefixed),
                    min(frames, 2),
                    None,
                    launcher,
                    [],
                    title="launcher error",
                )
            )
    rest = [a for a in asserts if id(a) not in shown_asserts]
    if rest:
        out.append("")
        out.extend(_assert_lines(rest, indent=""))
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
    #: ``culprit`` (a candidate root cause), ``victim`` (a consequence of another rank's failure),
    #: ``handled`` (caught: the rank kept writing).
    role: Role = Role.CULPRIT
    #: torch's note that a CUDA error is reported asynchronously (the frames may be wrong).
    cuda_async: bool = False
    out_of_memory: Optional[OutOfMemory] = None


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
    )


def _root_entry(report: ErrorsReport, counts: LineCounts) -> Optional[RootCauseEntry]:
    root = report.root_cause
    if root is None:
        return None
    tb, group = root.traceback, root.group
    frame = user_frame(tb.frames)
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
        reason=_reason(report, root),
        location_unreliable=unreliable,
        rerun=rerun_command(tb, _launcher(counts, report)) if unreliable else None,
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
        minority=_minority(report.groups),
        unprefixed_groups=[_entry(group) for group in report.unprefixed],
        lines=counts.lines,
        unprefixed_lines=counts.unprefixed,
        tracebacks=counts.tracebacks,
        truncated_tracebacks=counts.truncated,
        torchrun_failures=counts.exits,
        unprefixed_exception_lines=[
            ExceptionLineCount(line, count) for line, count in _orphan_exception_lines(counts)
        ],
        root_cause=_root_entry(report, counts),
        device_asserts=counts.device_asserts,
        verdict=counts.verdict,
        findings=counts.findings,
    )


def _minority(groups: list[ErrorGroup]) -> list[int]:
    """Indexes of the errors fewer ranks raised than the most common one."""
    most = max((len(g.labels) for g in groups), default=0)
    return [i for i, g in enumerate(groups) if len(g.labels) < most]
