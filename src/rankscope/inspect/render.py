"""The words of `rankscope fds` and `rankscope strace`: summary first, then the details."""

from __future__ import annotations

from typing import Optional

from rankscope.inspect.report import FdsReport, ProcessFds, ProcessTrace, StraceReport
from rankscope.model import Failure, RankId

_SHOWN_TARGETS = 3


def _header(pid: int, command: str, rank: Optional[RankId]) -> str:
    who = f"pid {pid}" + (f" (rank {rank.label})" if rank is not None and rank.rank is not None else "")
    return f"{who}: {' '.join(command.split())}"[:160]


def _failures(failures: tuple[Failure, ...]) -> list[str]:
    return [f"FAILED {f.target}: {f.reason}" + (f" ({f.hint})" if f.hint else "") for f in failures]


def fds_summary(process: ProcessFds) -> str:
    counts = ", ".join(f"{count} {kind}" for kind, count in process.counts.items()) or "none"
    if process.limit_soft is None:
        limit = "no limit"
    else:
        hard = "unlimited" if process.limit_hard is None else str(process.limit_hard)
        limit = f"limit {process.limit_soft} soft / {hard} hard"
    return f"{len(process.fds)} descriptors ({limit}): {counts}"


def render_process_fds(process: ProcessFds) -> list[str]:
    lines = [_header(process.pid, process.command, process.rank), "  " + fds_summary(process)]
    if process.near_limit:
        lines.append(
            f"  WARNING: {len(process.fds)} of {process.limit_soft} open files: the next open()/accept() may "
            "fail with EMFILE (raise it: ulimit -n in the launcher line)"
        )
    lines.append(f"  {'FD':>4}  {'KIND':<17} {'MODE':<11} WHAT")
    for entry in process.fds:
        detail = entry.describe()
        if entry.offset is not None:
            detail += f"  offset {entry.offset}"
        lines.append(f"  {entry.fd:>4}  {entry.kind:<17} {entry.mode:<11} {detail}")
    return lines


def _document(blocks: list[list[str]], failures: tuple[Failure, ...]) -> str:
    """One block per process, a blank line between them, the failed processes last."""
    text = "\n\n".join("\n".join(block) for block in blocks)
    failed = _failures(failures)
    if failed:
        text += ("\n\n" if text else "") + "\n".join(failed)
    return text + "\n"


def render_fds(report: FdsReport) -> str:
    return _document([render_process_fds(process) for process in report.processes], report.failures)


def render_process_trace(process: ProcessTrace, top: int = 10) -> list[str]:
    lines = [_header(process.pid, process.command, process.rank)]
    total = sum(count.calls for count in process.syscalls)
    state = f"state {process.state_after} after detaching" + (
        " (continued with SIGCONT)" if process.continued else ""
    )
    lines.append(
        f"  traced {process.seconds:.1f} s, {process.threads} threads, {total} calls finished; {state}"
    )
    if process.blocked:
        lines.append("  blocked now (calls not returned when tracing stopped, or waits polled in a loop):")
        for blocked in process.blocked:
            on = f" -- {blocked.on}" if blocked.on else ""
            name = f" ({blocked.thread})" if blocked.thread else ""
            polls = f" (polling: {blocked.polls} calls timed out)" if blocked.polls else ""
            lines.append(
                f"    thread {blocked.tid}{name}: {blocked.syscall}{polls} for >= {blocked.waited:.1f} s{on}"
            )
    findings = [group for group in process.failures if not group.noise]
    noise = [group for group in process.failures if group.noise]
    if findings:
        lines.append("  failing calls:")
        for group in findings:
            calls = ", ".join(f"{name} x{count}" for name, count in group.syscalls.items())
            lines.append(f"    {group.errno} ({group.message}) x{group.count}: {calls}")
            for target in group.targets[:_SHOWN_TARGETS]:
                lines.append(f"      {target}")
    if noise:
        folded = ", ".join(f"{group.errno} x{group.count}" for group in noise)
        lines.append(f"  routine errors (not findings): {folded}")
    if process.syscalls:
        lines.append(f"  {'SYSCALL':<18} {'CALLS':>8} {'ERRORS':>7} {'SECONDS':>10}")
        for count in process.syscalls[:top]:
            lines.append(f"  {count.name:<18} {count.calls:>8} {count.errors:>7} {count.seconds:>10.6f}")
        if len(process.syscalls) > top:
            lines.append(f"  ... {len(process.syscalls) - top} more (--json has them all)")
    return lines


def render_strace(report: StraceReport) -> str:
    return _document([render_process_trace(process) for process in report.processes], report.failures)
