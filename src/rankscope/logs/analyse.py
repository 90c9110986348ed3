"""`logs errors`' pure judgements (no I/O): every traceback and launcher summary as a finding, the
launcher named in rerun advice, why the root cause was chosen, the exception lines worth listing."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from rankscope.evidence import Finding, Kind
from rankscope.folding import RankSet
from rankscope.logs.cuda import ASYNC_STEP, HARDWARE_STEP, gpu_hardware_error, is_async_cuda_error
from rankscope.logs.dataloader import worker_death_step
from rankscope.logs.finished import left_findings
from rankscope.logs.grouping import ErrorGroup, ErrorsReport, RootCause, in_init_process_group
from rankscope.logs.labels import fold_labels, label_text, process_of
from rankscope.logs.line_evidence import ELSEWHERE_STEP, KILLED_STEP, shell_signal, signal_cause
from rankscope.logs.roles import Role, user_frame, where_frame
from rankscope.logs.setup_steps import setup_step
from rankscope.logs.stopped import stopped_finding
from rankscope.logs.torchrun_summary import SUMMARY_SOURCE, RankExit
from rankscope.logs.tracebacks import RankTraceback

if TYPE_CHECKING:
    from rankscope.logs.collect import LineCounts


def traceback_step(tb: RankTraceback) -> str:
    """The next step a traceback's own words call for: a GPU's hardware fault, an error whose words
    name a set-up cause (rankscope.logs.setup_steps), a CUDA error reported asynchronously
    (rankscope.logs.cuda), a DataLoader worker's death (rankscope.logs.dataloader); empty for any other."""
    if gpu_hardware_error(tb) is not None:
        return HARDWARE_STEP
    step = setup_step(tb)
    if step:
        return step
    if is_async_cuda_error(tb):
        return ASYNC_STEP
    return worker_death_step([*tb.chained, tb.exception]) or ""


def restart_step(root: Optional[RootCause]) -> str:
    """The next step for a set-up error (rankscope.logs.setup_steps) that ended a restarted job whose
    first attempt got past that set-up with the same settings (it failed later, in the user's code):
    the settings are not the cause; '' for any other root cause."""
    if root is None or not root.restarts or root.first_attempt is None or root.first_attempt is root.group:
        return ""
    first = root.first_attempt.example
    if not setup_step(root.traceback) or setup_step(first) or in_init_process_group(first):
        return ""
    frame = user_frame(first.frames)
    at = f" at {frame.filename}:{frame.line}" if frame is not None else ""
    return (
        "the first attempt's ranks got past this set-up with the same settings (they failed later: "
        f"{first.exception_type}{at}), so the settings are not the cause: the workers torchrun restarted "
        "failed to set up again (seen with torch 2.13 and gloo after --max-restarts); fix the first "
        "attempt's error, which caused the restart"
    )


def traceback_findings(
    report: ErrorsReport, sources: dict[str, int], restarts: Optional[dict[str, int]] = None
) -> list[Finding]:
    """One finding per distinct error of a rank: its earliest traceback (by time, else log order);
    ``restarts``: torchrun's restarts per source, which supersede the errors raised only in the
    attempts before the last."""
    out = []
    root_group = report.root_cause.group if report.root_cause is not None else None
    restarted_step = restart_step(report.root_cause)
    for group in report.groups:
        tb = group.timed or group.example
        restarted = (restarts or {}).get(tb.source, 0)
        frame = where_frame(tb.frames)
        out.append(
            Finding(
                Kind.CUT_TRACEBACK if tb.truncated else Kind.TRACEBACK,
                "python_exception",
                str(group.role),
                # no prefix: the global rank its own words give (torchrun's summary quoting its error file)
                label_text(tb.label)
                or tb.worker
                or (str(tb.global_rank) if tb.global_rank is not None else None),
                tb.exception or tb.exception_type,
                f"{frame.filename}:{frame.line}" if frame is not None else None,
                tb.source,
                tb.line_number,
                (sources.get(tb.source, 0) << 40) + tb.line_number,
                global_rank=tb.global_rank,
                time=tb.time,
                exception=tb.exception_type,
                ranks=fold_labels(group.labels),
                next_step=(group is root_group and restarted_step) or traceback_step(tb),
                superseded=group.settled_attempt(restarts or {}) < restarted,
            )
        )
        if tb.exception_type == "KeyboardInterrupt" and not tb.truncated:
            by = f"{_ranks_phrase(group.labels)} (KeyboardInterrupt)"
            out.append(stopped_finding(2, None, tb.source, tb.line_number, out[-1].order, by))
    return out


def _ranks_phrase(labels: list[Optional[bytes]]) -> str:
    """``ranks 0-1`` for plain rank labels, else the labels folded (``node1:[0-3]``)."""
    named = [label for label in labels if label is not None]
    if named and all(label.isdigit() for label in named):
        return RankSet.of(int(label) for label in named).phrase()
    return fold_labels(labels) or "the program"


def summary_findings(exits: list[RankExit]) -> list[Finding]:
    """torchrun's failure summary: ranks killed by a signal, or failed with an exit code."""
    out = []
    for entry in exits:
        code = entry.exitcode
        if code is not None and shell_signal(code) is not None:
            code = -(shell_signal(code) or 0)  # "exitcode : 137": a shell's child killed by SIGKILL
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
                SUMMARY_SOURCE,
                0,
                (1 << 62) + (0 if entry.root_cause else 1),
                global_rank=entry.rank,
                next_step=step,
            )
        )
    return out + left_findings(exits)


def exits_with_their_tracebacks(findings: list[Finding], exits: list[RankExit]) -> list[Finding]:
    """A launcher's "exited with an error code" of a rank whose traceback is in this log as a victim's
    (it lost its peer, its collective timed out) is that consequence too: its traceback is not
    elsewhere, and the rank that ended first is another (one that left no error: ``os._exit(0)``, a
    kill), so none of them is the root cause."""
    victims: set[Optional[int]] = set()
    for f in findings:
        if (
            f.kind in (Kind.TRACEBACK, Kind.EXCEPTION_LINE)
            and f.role == "victim"
            and f.global_rank is not None
        ):
            victims.add(f.global_rank)
            with contextlib.suppress(ValueError):  # every rank of its group ("0,2"), where plain numbers
                victims.update(RankSet.parse(f.ranks or ""))
    if not victims:
        return findings
    # torchrun's own line names the local rank: its summary gives the global one beside it
    local = {str(e.local_rank) for e in exits if e.rank in victims and e.local_rank is not None}

    def explained(f: Finding) -> bool:
        return f.global_rank in victims if f.global_rank is not None else f.local and f.who in local

    return [
        replace(f, role="victim", what=f.what + " (its traceback is in this log: a consequence)")
        if f.cause == "tracebacks_elsewhere" and f.role == "culprit" and explained(f)
        else f
        for f in findings
    ]


def with_summary(findings: list[Finding], exits: list[RankExit]) -> list[Finding]:
    """The findings read beside torchrun's failure summary: a local rank its one node's summary names
    gets that entry's global rank, and a summary entry of a death the lines already show as a
    consequence (the watchdog's abort) takes that role."""
    return _deaths_explained(_named_by_pid(_named_by_summary(findings, exits), exits), exits)


def _named_by_pid(findings: list[Finding], exits: list[RankExit]) -> list[Finding]:
    """An NCCL line names its process (``host,pid=N``: ``gn4410:2817734:2820201 [3] ... NCCL WARN``);
    torchrun's summary gives the same pid's global rank (``exitcode : 1 (pid: 2817734)``)."""
    by_pid = {(e.host.split(".")[0], e.pid): e.rank for e in exits if e.pid is not None}
    if not by_pid:
        return findings

    def named(f: Finding) -> Finding:
        # the same host too (its short name): a pid is a node's own, other nodes reuse it
        process = process_of(f.who) if f.global_rank is None else None
        rank = by_pid.get((process[0].split(".")[0], process[1])) if process else None
        return replace(f, global_rank=rank) if rank is not None else f

    return [named(f) for f in findings]


def _named_by_summary(findings: list[Finding], exits: list[RankExit]) -> list[Finding]:
    """torchrun's own line names a local rank (``failed (exitcode: -11) local_rank: 1``), as its
    ``--tee`` prefix does on a rank's crash dump (``[default3]:Fatal Python error: ...``); its failure
    summary names the same process's global rank beside it (``rank : 11 (local_rank: 3)``). Where the
    summary is one node's (one host), a local rank that one entry has is that entry's rank."""
    if not exits or len({e.host for e in exits}) != 1:
        return findings
    by_local: dict[int, set[int]] = {}
    for e in exits:
        if e.local_rank is not None:
            by_local.setdefault(e.local_rank, set()).add(e.rank)

    def named(f: Finding) -> Finding:
        launcher = f.kind in (Kind.LAUNCHER, Kind.NATIVE_CRASH, Kind.EXCEPTION_LINE)
        if not (f.local and f.global_rank is None and launcher and f.who and f.who.isdigit()):
            return f
        ranks = by_local.get(int(f.who), set())
        return replace(f, global_rank=next(iter(ranks))) if len(ranks) == 1 else f

    return [named(f) for f in findings]


def _deaths_explained(findings: list[Finding], exits: list[RankExit]) -> list[Finding]:
    """torchrun's summary entry of a rank killed by a signal, where the log's lines already show that
    death as a consequence (torch's NCCL watchdog aborting the process: SIGABRT after its timeout;
    torchrun's own ``failed (exitcode: -6) local_rank: N`` line read after the watchdog's lines): the
    same death, so the same role. The summary names the global rank, torchrun's line the local one."""
    explained = [
        f for f in findings if f.role == "victim" and f.kind == Kind.LAUNCHER and f.source != SUMMARY_SOURCE
    ]
    if not explained:
        return findings
    local_of = {e.rank: e.local_rank for e in exits}

    def same_death(summary: Finding, line: Finding) -> bool:
        if summary.cause != line.cause:
            return False
        if line.global_rank is not None:
            return line.global_rank == summary.global_rank
        local = local_of.get(summary.global_rank if summary.global_rank is not None else -1)
        return line.local and local is not None and line.who == str(local)

    out = []
    for f in findings:
        if f.source == SUMMARY_SOURCE and f.role == "culprit" and f.kind == Kind.LAUNCHER:
            line = next((e for e in explained if same_death(f, e)), None)
            if line is not None:
                why = line.what.partition(" after ")[2]
                f = replace(f, role="victim", what=f.what + (f" after {why}" if why else " (a consequence)"))
        out.append(f)
    return out


_PLAIN_RANKS = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")


def still_running(findings: Sequence[Finding]) -> list[int]:
    """Ranks torchrun's summary says it stopped with SIGTERM (still running when it tore the job down)
    that wrote no error of their own, where the errors of the log are all consequences (lost peers,
    timeouts): they never reached what the others waited for, so one of them is the likeliest cause
    (stuck, or slow: a straggler). Empty where a culprit is in the log or none was stopped that way."""
    if any(f.role == "culprit" and not f.superseded for f in findings):
        return []
    errors: set[int] = set()
    for f in findings:
        if f.kind in (Kind.TRACEBACK, Kind.EXCEPTION_LINE, Kind.CUT_TRACEBACK) and f.global_rank is not None:
            errors.add(f.global_rank)
            # one finding stands for its group: every rank that printed the error (torch's markers)
            if f.ranks and _PLAIN_RANKS.fullmatch(f.ranks):
                errors.update(RankSet.parse(f.ranks))
    if not errors:
        return []
    stopped = {
        f.global_rank
        for f in findings
        if f.source == SUMMARY_SOURCE and f.cause == "sigterm" and f.global_rank is not None
    }
    return sorted(r for r in stopped - errors if r is not None)


def still_running_words(ranks: Sequence[int]) -> str:
    """What :func:`still_running`'s ranks mean, in words."""
    who = RankSet.of(ranks).phrase()
    return (
        f"{who} {'was' if len(ranks) == 1 else 'were'} still running when the others failed waiting (torchrun "
        f"stopped {'it' if len(ranks) == 1 else 'them'} with SIGTERM afterwards) and wrote no error: "
        f"{'it' if len(ranks) == 1 else 'they'} never reached the collective the others waited in, stuck or "
        "slow (a straggler); its last lines, or `rankscope stacks` the next time it hangs, say where"
    )


def launcher_of(counts: LineCounts, report: ErrorsReport) -> str:
    torchrun = counts.exits or any("ChildFailedError" in g.exception_type for g in report.unprefixed)
    return "torchrun ..." if torchrun else "python"


def root_reason(report: ErrorsReport, root: RootCause) -> str:
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
    first = root.first_attempt
    if root.restarts and first is None:
        after.insert(
            0,
            f"torchrun restarted the workers {root.restarts} time(s) after it, and no rank's traceback of a "
            "later attempt is in this log",
        )
    elif root.restarts:
        restarted = f"torchrun restarted the workers {root.restarts} time(s) and this ended the last attempt"
        if first is not None and first is not root.group:
            where = user_frame(first.example.frames)
            at = f" at {where.filename}:{where.line}" if where is not None else ""
            restarted += f"; the first attempt failed with {first.exception_type}{at}"
        after.insert(0, restarted)
    why = (
        "the first traceback that is neither a consequence of another rank's failure "
        "(lost peer, timeout, signal) nor caught (its rank stopped writing)"
    )
    return why + (f"; {', '.join(after)}" if after else "")


def caught_before(report: ErrorsReport) -> Optional[ErrorGroup]:
    """Where every error is a victim's, the first caught error raised before the first of them: the
    only error a rank raised itself (its rank lived on, then the others lost or waited for it)."""
    victims = [g.example.order for g in report.groups if g.role is Role.VICTIM]
    handled = [
        g for g in report.groups if g.role is Role.HANDLED and g.example.order < min(victims, default=0)
    ]
    return min(handled, key=lambda g: g.example.order, default=None)


def orphan_exception_lines(counts: LineCounts) -> list[tuple[str, int]]:
    """Exception lines, normalised and counted, when they outnumber the rebuilt tracebacks."""
    grouped = counts.exception_lines
    if sum(grouped.values()) <= counts.tracebacks:
        return []
    return grouped.most_common()
