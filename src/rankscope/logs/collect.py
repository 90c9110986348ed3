"""`logs errors`' scan: the traceback collector, the line evidence and the device asserts driven over
the sources in one pass; what it counts (:class:`LineCounts`) and the findings weighed from it."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Optional

from rankscope.evidence import Finding, decide
from rankscope.logs.analyse import (
    exits_with_their_tracebacks,
    summary_findings,
    traceback_findings,
    with_summary,
)
from rankscope.logs.c10d_errors import classify, specific_findings
from rankscope.logs.cuda import DeviceAssert, DeviceAsserts
from rankscope.logs.grouping import ErrorsReport, Grouper, normalise_message
from rankscope.logs.labels import label_text
from rankscope.logs.line_evidence import LineEvidence
from rankscope.logs.lone_failure import name_the_lone_failure
from rankscope.logs.nccl_reason import NcclReason, is_nccl_name, nccl_reason
from rankscope.logs.prefixes import tally_lines
from rankscope.logs.reading import Reading
from rankscope.logs.roles import user_frame
from rankscope.logs.torchrun_summary import RankExit, find_summaries
from rankscope.logs.tracebacks import RankTraceback, TracebackCollector

#: An exception line at the start of a line: "ValueError: x", "torch.OutOfMemoryError: y", "KeyboardInterrupt".
_EXCEPTION_LINE = re.compile(
    rb"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure)(?::[^\n]*)?)$", re.M
)

#: Tracebacks per rank kept to tell its exception lines from those of its tracebacks (the evidence
#: keeps a rank's first few exception lines; these are its first tracebacks').
TRACED_PER_RANK = 16


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
    #: NCCL's own reason after a finding's error (a DistBackendError's ``ncclSystemError: ...`` and
    #: ``Last error:``), by the finding's (source, line): a traceback's, or an exception line's.
    nccl_reasons: dict[tuple[str, int], NcclReason] = field(default_factory=dict)
    #: NCCL WARN lines that are no finding of their own: (who, message, source, line), the first few.
    nccl_warnings: list[tuple[str, str, str, int]] = field(default_factory=list)
    #: NVIDIA Xids of a GPU fault in the log (rankscope.logs.kernel_xid): (what, source, line).
    gpu_faults: list[tuple[str, str, int]] = field(default_factory=list)


def scan_errors(reading: Reading) -> tuple[ErrorsReport, LineCounts]:
    grouper = Grouper()
    traced: set[tuple[Optional[bytes], str]] = set()
    per_label: Counter[Optional[bytes]] = Counter()

    def sink(tb: RankTraceback) -> None:
        if tb.exception and classify(tb.exception) is not None:
            frame = user_frame(tb.frames)
            where = f"{frame.filename}:{frame.line}" if frame is not None else None
            evidence.c10d.traceback(label_text(tb.label) or tb.worker, tb.global_rank, where)
        # a rank's first exception lines are matched against its first tracebacks: bounded per rank
        if per_label[tb.label] < TRACED_PER_RANK:
            per_label[tb.label] += 1
            traced.add((tb.label, tb.exception))
            traced.update((tb.label, chained) for chained in tb.chained)  # lines of the same traceback
            # NCCL's error name continues the message: the traceback holds that exception line too
            traced.update((tb.label, line) for line in tb.tail if is_nccl_name(line))
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
    restarts = {source: attempts.restarts for source, attempts in collector.restarts.items()}
    report = grouper.report(restarts)
    counts.findings = specific_findings(
        exits_with_their_tracebacks(
            with_summary(
                name_the_lone_failure(
                    [
                        *traceback_findings(report, sources, restarts),
                        *superseded(
                            [*evidence.findings(traced), *summary_findings(counts.exits)],
                            {s: a.last_restart_line for s, a in collector.restarts.items() if a.restarts},
                        ),
                    ],
                    "python_exception",
                    {
                        ((g.timed or g.example).source, (g.timed or g.example).line_number): g.last_count
                        for g in report.groups
                    },
                ),
                counts.exits,
            ),
            counts.exits,
        ),
        evidence.c10d,
    )
    counts.verdict = decide(counts.findings)
    counts.nccl_reasons = dict(evidence.reasons)
    counts.nccl_warnings = list(evidence.nccl_warnings)
    counts.gpu_faults = list(evidence.gpu_faults)
    for group in report.groups:
        tb = group.timed or group.example  # the traceback its finding names
        reason = nccl_reason(tb.tail)
        if reason:
            counts.nccl_reasons[(tb.source, tb.line_number)] = reason
    return report, counts


def superseded(findings: list[Finding], restarted: dict[str, int]) -> list[Finding]:
    """``findings`` of lines, those up to their source's last torchrun restart (``restarted``: its
    line, by source) marked superseded."""
    return [
        replace(f, superseded=True) if f.source in restarted and f.line <= restarted[f.source] else f
        for f in findings
    ]


def _normalised_line(line: str) -> str:
    name, _, message = line.partition(":")
    return f"{name}: {normalise_message(message.strip())}" if message else name
