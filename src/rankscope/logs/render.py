"""Text for a person (pure): the reports of `logs ranks`, `logs split` and `logs errors`."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from rankscope.evidence import Finding, Kind
from rankscope.folding import RankSet
from rankscope.logs.analyse import (
    caught_before,
    launcher_of,
    orphan_exception_lines,
    restart_step,
    root_reason,
    still_running,
    still_running_words,
    traceback_step,
)
from rankscope.logs.collect import LineCounts
from rankscope.logs.cuda import (
    HARDWARE_STEP,
    DeviceAssert,
    asserts_of,
    gpu_hardware_error,
    is_async_cuda_error,
    out_of_memory,
    rerun_command,
    short_oom,
)
from rankscope.logs.demux import SplitFile
from rankscope.logs.finished import finished_early, finished_words
from rankscope.logs.grouping import ErrorGroup, ErrorsReport, RootCause
from rankscope.logs.inventory import Inventory, RanksDocument
from rankscope.logs.labels import fold_labels, host_and_rank, label_text
from rankscope.logs.nccl_reason import NcclReason, nccl_reason
from rankscope.logs.roles import Role, where_frame
from rankscope.logs.torchrun_summary import RankExit
from rankscope.logs.tracebacks import HANDLED_LINES, HEADER, RankTraceback, reraised_from

#: What `logs ranks` says when no line carries a rank prefix.
NO_PREFIX = (
    "note: no line carries a rank prefix; add one at the source: "
    "torchrun --role $(hostname -s): --tee 3, srun --label, mpirun --tag-output, "
    "or rankscope prefix -- CMD"
)


def render_ranks(inventory: Inventory, document: RanksDocument, notes: Sequence[str]) -> str:
    """Which ranks wrote how many lines (and when), the unprefixed lines, the reading's notes."""
    labels = list(inventory.ranks)
    lines = [f"{len(labels)} rank(s): {fold_labels(labels) or '-'}   {inventory.lines} lines"]
    for row in document.ranks:
        times = f"  {row.first_time} .. {row.last_time}" if row.first_time else ""
        lines.append(f"  {row.label:>20}  {row.lines:>10} lines{times}")
    if inventory.unprefixed:
        lines.append(f"  {'(no rank prefix)':>20}  {inventory.unprefixed:>10} lines")
    lines += [f"note: {note}" for note in notes]
    if not labels:
        lines.append(NO_PREFIX)
    return "\n".join(lines)


def render_split(out_dir: Path, files: Sequence[SplitFile], notes: Sequence[str]) -> str:
    """The files `logs split` wrote, one line each, and the reading's notes."""
    lines = [f"wrote {len(files)} file(s) to {out_dir}/"]
    for row in files:
        name = Path(row.file).name
        lines.append(f"  {name:>28}  {row.lines:>10} lines  ({row.label or 'no rank prefix'})")
    lines += [f"note: {note}" for note in notes]
    return "\n".join(lines)


# --- logs errors ---

PREFIX_ADVICE = (
    "add rank prefixes at the source: torchrun --role $(hostname -s): --tee 3, srun --label, "
    "mpirun --tag-output, or rankscope prefix -- CMD"
)


def _where(tb: RankTraceback) -> str:
    who = label_text(tb.label) or "(no rank prefix)"
    if tb.relayed:
        who += f", quoted by {label_text(tb.reporter) or '(no rank prefix)'}"
    return f"{who} ({tb.source} line {tb.line_number})"


_ROLE_WORDS = {
    Role.CULPRIT: "culprit",
    Role.VICTIM: "victim (a consequence of another failure: lost peer, timeout, signal)",
    Role.HANDLED: f"handled (the rank wrote {HANDLED_LINES}+ more lines after it)",
}


def _handled_because(tb: RankTraceback) -> str:
    """Why a traceback counts as caught (rankscope.logs.tracebacks, rankscope.logs.grouping)."""
    if tb.ignored:
        return (
            "Python printed it as `Exception ignored in: ...` (raised in __del__ or a callback) and went on"
        )
    if tb.handled and tb.lines_after >= HANDLED_LINES:
        return f"the rank wrote {HANDLED_LINES}+ more lines after it"
    if tb.followed:
        return "the rank printed another traceback after it"
    if tb.logged:
        return "a logger's ERROR line introduced it and the rank wrote on: the program caught and logged it"
    return "the program printed it, unlike the tracebacks torch marks as uncaught, and its rank wrote on"


def _cuda_lines(group: ErrorGroup, launcher: str) -> list[str]:
    """CUDA facts of an error: its location's reliability, its out-of-memory numbers."""
    out = []
    example = group.example
    hardware = gpu_hardware_error(example)
    if hardware is not None:
        out.append(f"  {hardware}: {HARDWARE_STEP}")
    elif is_async_cuda_error(example):
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
    return [indent + item.text() for item in asserts]


def _asserts_of(group: ErrorGroup, asserts: list[DeviceAssert]) -> list[DeviceAssert]:
    return asserts_of((label_text(label) for label in group.labels), asserts)


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
    if group.role is Role.HANDLED:
        role = f"handled ({_handled_because(group.example)})"
    if root is not None and group is root.group:
        role = "culprit, the root cause"
    if title == "error":
        head = (
            f"{title} {index} of {total} — {role}, {len(labels)} rank(s): {ranks}{_global_ranks_note(group)}"
        )
    else:
        head = f"{title} {index} of {total} — {role} (no rank prefix: the launcher, or unprefixed output)"
    if group.reporters:
        quoted = fold_labels(group.reporters)
        head += f"  (quoted in the CheckpointException of rank(s) {quoted})"
    elif group.count != len(labels):
        head += f"  ({group.count} tracebacks)"
    out = [head]
    example = group.example
    for chained in example.chained:
        worker = reraised_from(chained)
        if worker is not None:
            out.append(f"    (raised {worker}; the rank re-raised it as: {chained})")
        elif chained == example.exception:
            out.append(
                "    (raised twice: where it happened, then where its result was awaited; both frames below)"
            )
        else:
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
        out.extend(f"  {line}" for line in nccl_reason(example.tail).lines())
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
    frame = where_frame(tb.frames)
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
            out = [
                f"root cause: not in this log — every error is a consequence of another failure "
                f"({sum(g.count for g in victims)} traceback(s) of lost peers, timeouts or signals); "
                f"the rank that failed first left no traceback here{launcher}"
            ]
            running = still_running(counts.findings)
            if running:
                out.append(f"  lead: {still_running_words(running)}")
            finished = finished_early(counts.findings)
            if finished:
                out.append(f"  lead: {finished_words(finished)}")
            lead = caught_before(report)
            if lead is not None:
                tb = lead.example
                host, number = host_and_rank(tb.label) if tb.label is not None else (None, None)
                who = label_text(tb.label) or "a worker without a rank prefix"
                who = f"rank {who}" if host is None and number is not None else who
                out.append(
                    f"  lead: before them {who} caught {_short_exception(tb)}{_frame_text(tb)} and went on "
                    f"({tb.source} line {tb.line_number}): a rank that skips or reorders a collective after an error it caught "
                    "leaves the others waiting until they time out"
                )
            return out
        return [f"root cause: none — every traceback was caught (its rank kept writing){launcher}"]
    tb, group = root.traceback, root.group
    host, number = host_and_rank(tb.label) if tb.label is not None else (None, None)
    who = label_text(tb.label) or _worker_words(tb.worker)
    if host is None and number is not None:
        who = f"rank {who}"
    named = None
    if tb.worker is None and tb.global_rank is None and number is None:
        named = _named_by_launcher(tb, counts)  # no rank in its prefix: its launcher's report may name it
    if named is not None:
        who = named
    elif tb.label is None and tb.worker is None and tb.global_rank is not None:
        who = f"rank {tb.global_rank} (torchrun's summary quotes its error file)"
    elif tb.global_rank is not None and number != tb.global_rank:
        who += f" (global rank {tb.global_rank})"
    if len(group.labels) > 1:
        who += f" (and {len(group.labels) - 1} more rank(s) with this error: {fold_labels(group.labels)})"
    when = f"by timestamp ({tb.time})" if root.by == "timestamp" else "in log order"
    first = f"root cause: {who}: {_short_exception(tb)}{_frame_text(tb)} — the first fatal error {when}"
    out = [first, f"  why: {root_reason(report, root)}"]
    earlier = [c for c in tb.chained if c != tb.exception and reraised_from(c) is None]
    if earlier:  # the chain's first error: what went wrong before the handler (or wrapper) failed too
        out.append(f"  raised while handling: {earlier[0]}")
    last = nccl_reason(tb.tail).last_error
    if last:  # NCCL's error name is shown under the error itself
        out.append(f"  NCCL's last error: {last}")
    elif counts.nccl_warnings and "NCCL" in tb.exception:
        # torch says only "unhandled system error": NCCL's own warning before it says what failed
        who, said, source, line = counts.nccl_warnings[0]
        out.append(
            f"  NCCL's warning: {who}: {said} ({source} line {line}; `rankscope logs nccl` explains it)"
        )
    fault = counts.gpu_faults[0] if counts.gpu_faults and "CUDA error" in tb.exception else None
    if fault is not None:  # the driver's word on the GPU: the CUDA error is the fault's, not the program's
        what, source, line = fault
        out.append(f"  GPU fault: {what} ({source} line {line}): the GPU failed, not the program")
        out.append(f"  next: {HARDWARE_STEP}")
        return out
    asynchronous = gpu_hardware_error(tb) is None and is_async_cuda_error(tb)
    step = restart_step(root) or traceback_step(tb)
    if step and not asynchronous:  # an asynchronous error's step is the rerun line below, with its command
        out.append(f"  next: {step}")
    if asynchronous:
        out.append(
            "  location unreliable: CUDA reported this kernel error asynchronously; "
            f"rerun synchronously: {rerun_command(tb, launcher_of(counts, report))}"
        )
        out.extend(_assert_lines(_asserts_of(group, counts.device_asserts)))
    return out


def _named_by_launcher(tb: RankTraceback, counts: LineCounts) -> Optional[str]:
    """Who rankscope.logs.lone_failure.name_the_lone_failure made a traceback without a prefix: the
    summary's rank, or the local rank of the launcher's line; None where it named none."""
    for finding in counts.findings:
        if (finding.source, finding.line) != (tb.source, tb.line_number) or not finding.who:
            continue
        if finding.who == label_text(tb.label):
            return None  # its own prefix, unchanged
        if finding.kind not in (Kind.TRACEBACK, Kind.CUT_TRACEBACK):
            continue
        if finding.global_rank is not None:
            return f"rank {finding.global_rank} (the one process its launcher reports failed)"
        if finding.local:
            return f"local rank {finding.who} (the one process its launcher reports failed)"
        return f"{_launcher_noun(finding.who, counts)} {finding.who} (the one process its launcher reports failed)"
    return None


def _launcher_noun(who: str, counts: LineCounts) -> str:
    """What the launcher's line that named ``who`` calls its processes (srun's ``task``,
    torch.multiprocessing.spawn's ``process``)."""
    for finding in counts.findings:
        if finding.kind in (Kind.LAUNCHER, Kind.LAUNCHER_SUMMARY) and finding.who == who:
            said = re.match(rf"[^:]+: (.+?) {re.escape(who)}\b", finding.what)
            if said is not None:
                return said.group(1)
    return "process"


def _worker_words(worker: Optional[str]) -> str:
    """A traceback without a rank prefix, named by what its text says: a Ray worker, a spawned process."""
    if worker is None:
        return "(no rank prefix)"
    return f"spawned process {worker}" if worker.isdigit() else f"Ray worker {worker}"


_KIND_WORDS = {
    Kind.NCCL: "an NCCL call of this process failed (NCCL WARN)",
    Kind.TRACEBACK: "torch's message in this rank's traceback names the cause",
    Kind.EXCEPTION_LINE: "an exception line of this rank (its traceback header is not in the log)",
    Kind.NATIVE_CRASH: "a native crash (signal backtrace)",
    Kind.LAUNCHER: "the launcher reported this process's death",
    Kind.NETWORK: "a connection this process needed failed (an NCCL NET/IB completion error, a store out of reach)",
    Kind.WATCHDOG: "ranks that timed out waiting for another (torch's NCCL watchdog, a communicator's set-up)",
    Kind.LAUNCHER_SUMMARY: "only the launcher's failure summary is in this log",
}


#: Where a cause says more than its kind does.
_CAUSE_WORDS = {
    "ranks_never_joined": "the messages of the ranks that waited (their count, or torchrun's summary of every rank) "
    "say which never arrived",
    "monitored_barrier": "torch's message in rank 0's traceback names the ranks that never reached the barrier",
    "nccl_id_wait": "the waiting ranks' messages name the rank whose NCCL communicator id never came",
    "store_unreachable": "torch's message in this rank's traceback: it could not connect to the rendezvous store",
    "stopped_from_outside": "the launcher's own words: it was sent a signal, and nothing stronger (a rank's "
    "error, a death, a hang) is in this log",
    "cpp_exception": "a C++ exception that nothing caught (`terminate called after throwing ...` and its "
    "`what():`): the process aborted with it, the reason of a SIGABRT its launcher reports",
}


def verdict_lines(verdict: Finding, reason: Optional[NcclReason] = None) -> list[str]:
    """The first lines of the report when the root cause is not a traceback; ``reason``: NCCL's own
    reason after it (an exception line of a DistBackendError)."""
    who = verdict.who or ""
    launcher = verdict.kind in (Kind.LAUNCHER, Kind.LAUNCHER_SUMMARY)  # its number may be a local rank
    if verdict.who is not None and verdict.who.isdigit() and not launcher:
        who = f"{'local rank' if verdict.local else 'rank'} {who}"
    if verdict.global_rank is not None and verdict.who != str(verdict.global_rank):
        who += f" (global rank {verdict.global_rank})"
    where = f" at {verdict.where}" if verdict.where else ""
    named = verdict.ranks and who and verdict.ranks != verdict.who  # else its words name them
    ranks = f" (rank(s) {verdict.ranks})" if named else ""
    # no identity to name: the finding's own words say whom it is about
    head = f"{who}: " if who else ""
    out = [f"root cause: {head}{verdict.what}{where}{ranks} [{verdict.cause}]"]
    because = _CAUSE_WORDS.get(verdict.cause) or _KIND_WORDS.get(verdict.kind, str(verdict.kind))
    if verdict.what.startswith("shell: "):
        because = "the shell's word that the command it ran died of a signal (it names no rank)"
    out.append(
        f"  why: {because}; the strongest evidence in the log (docs/logs.md, precedence) — "
        f"{verdict.source} line {verdict.line}"
        if verdict.line
        else f"  why: {because}"
    )
    if reason is not None:
        out.extend(f"  {line}" for line in reason.evidence())
    if verdict.next_step:
        out.append(f"  next: {verdict.next_step}")
    return out


#: How much of an exception line the root cause line shows.
SHORT_EXCEPTION = 200


def _short_exception(tb: RankTraceback) -> str:
    """The exception for the root cause line: out-of-memory numbers in place of torch's long text."""
    oom = short_oom(tb.exception)
    if oom is not None:
        return oom
    text = tb.exception or tb.exception_type
    return text if len(text) <= SHORT_EXCEPTION else text[: SHORT_EXCEPTION - 3] + "..."


def render_errors(report: ErrorsReport, counts: LineCounts, frames: int, notes: list[str]) -> str:
    out: list[str] = []
    groups = report.groups
    launcher = launcher_of(counts, report)
    asserts = counts.device_asserts
    shown_asserts: set[int] = set()
    verdict = counts.verdict
    # a traceback whose message names its cause (a collective mismatch, ...) is told as its finding
    other = verdict is not None and (
        verdict.kind not in (Kind.TRACEBACK, Kind.CUT_TRACEBACK) or verdict.cause != "python_exception"
    )
    if verdict is not None and other:
        out.extend(verdict_lines(verdict, counts.nccl_reasons.get((verdict.source, verdict.line))))
    if not groups:
        out.append(f"no complete Python traceback (no '{HEADER.decode()}' line) in {counts.lines} lines")
        finished = finished_early(counts.findings) if verdict is None else []
        if finished:  # the errors seen are lines, all a victim's: the node that finished is the lead
            out.append(f"  lead: {finished_words(finished)}")
    else:
        if not other:
            out.extend(_root_lines(report, counts))
        all_labels = {label for g in groups for label in g.labels}
        named = {label for label in all_labels if label is not None}
        bare = " and a worker without a rank prefix" if named and None in all_labels else ""
        without = f" + {len(report.unprefixed)} without a rank prefix" if report.unprefixed else ""
        roles = Counter(g.role for g in groups)
        split = ", ".join(f"{roles[r]} {r}" for r in Role if roles[r])
        out.append(
            f"{len(groups)} distinct error(s) ({split}) from {len(named or all_labels)} rank(s){bare}{without} "
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


def _render_exception_lines(counts: LineCounts) -> list[str]:
    rows = orphan_exception_lines(counts)
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
