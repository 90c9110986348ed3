"""Every signal of a `why` pass as findings of the one evidence model (pure): each finding says who,
what, where, its cause and role, and names its source (rankscope.evidence.Finding)."""

from __future__ import annotations

import signal as signals_module
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

from rankscope.evidence import CULPRIT, VICTIM, Finding, Kind
from rankscope.folding import RankSet
from rankscope.logs.kernel_xid import XID_CONSEQUENCE, XID_ECC, xid_step, xid_words
from rankscope.model import Frame
from rankscope.why.fatal import fatal_findings
from rankscope.why.signals import Gathered

if TYPE_CHECKING:
    from rankscope.stacks.report import StacksReport


KILLED_STEP = (
    "SIGKILL comes from outside the process: the kernel's OOM killer (host memory) or the scheduler "
    "(a time or memory limit); `journalctl -k | grep -i oom` on that node, `sacct -j JOB` under SLURM"
)


def signal_name(number: int) -> str:
    try:
        return signals_module.Signals(number).name
    except ValueError:
        return f"signal {number}"


def frame_words(frame: Optional[Frame]) -> Optional[str]:
    if frame is None:
        return None
    return f"{frame.function} ({frame.short_filename}:{frame.line})"


def rank_word(ranks: Sequence[int]) -> str:
    return RankSet.of(ranks).phrase()


def stacks_findings(gathered: Gathered) -> list[Finding]:
    """Live stacks: ranks elsewhere (or blocked on their GPU) while others wait; ranks not found;
    every rank in one collective."""
    report = gathered.stacks
    if report is None or report.diagnosis is None:
        return []
    out: list[Finding] = []
    diagnosis = report.diagnosis
    waiting = any(f.collective for f in diagnosis.findings)
    for finding in diagnosis.findings:
        ranks = sorted({m.rank for m in finding.members if m.rank is not None})
        where = frame_words(finding.called_from or finding.innermost)
        first = ranks[0] if ranks else None
        if finding.kind == "elsewhere" and waiting and any(m in diagnosis.divergent for m in finding.members):
            cause = "gpu_wait" if finding.gpu_wait else "elsewhere"
            text = finding.text + _ended_main(finding.innermost)
            if ended_main(finding.innermost):
                where = None  # threading's _shutdown is no place of the user's: its traceback is
            workers = [w for w in gathered.loader_workers if w.rank in ranks and w.location]
            if workers:  # what the rank waits for: its DataLoader workers' place
                where = workers[0].location
                text += "; it waits for its DataLoader workers: " + ", ".join(
                    f"pid {w.pid} is in {w.location}" for w in workers
                )
            out.append(
                Finding(Kind.STACKS, cause, CULPRIT, str(first), text, where, "stacks", 0, 0, first,
                        ranks=str(RankSet.of(ranks)))
            )  # fmt: skip
        elif finding.kind == "waiting" and any(m in diagnosis.divergent for m in finding.members):
            out.append(
                Finding(Kind.STACKS, "other_collective", CULPRIT, str(first), finding.text, where, "stacks", 0, 1,
                        first, ranks=str(RankSet.of(ranks)))
            )  # fmt: skip
        elif (
            finding.kind == "waiting"
            and not diagnosis.divergent
            and not any(f.cause == "mismatch" for f in out)
        ):
            # ranks in different collectives, as many in each: a mismatch with no side to blame
            out.append(
                Finding(Kind.STACKS, "mismatch", CULPRIT, None,
                        "the ranks wait in different collectives, as many in each: a mismatched collective "
                        "call (no majority says which side is off)",
                        None, "stacks", 0, 1, ranks=None)
            )  # fmt: skip
        elif finding.kind == "together" and finding.gpu_wait:
            out.append(
                Finding(Kind.STACKS, "gpu_wait", CULPRIT, str(first), finding.text, where, "stacks", 0, 0, first,
                        ranks=str(RankSet.of(ranks)))
            )  # fmt: skip
        elif finding.kind == "together" and finding.collective and not diagnosis.missing_ranks:
            out.append(
                Finding(Kind.STACKS, "all_waiting", CULPRIT, None, finding.text, where, "stacks", 0, 3,
                        ranks=str(RankSet.of(ranks)))
            )  # fmt: skip
    out.extend(_stragglers(report, waiting))
    # "while the others are there": only where some rank was dumped (between two attempts of an
    # elastic job every worker can end before its dump: none of them is missing among the others)
    others_there = any(p.dumped for p in report.processes)
    for proc in report.processes if others_there else []:
        if proc.was_stopped and proc.rank.rank is not None:
            rank = proc.rank.rank
            out.append(
                Finding(Kind.STACKS, "rank_stopped", CULPRIT, str(rank),
                        f"rank {rank} (pid {proc.pid}) was stopped (SIGSTOP, or a debugger holds it) before "
                        f"rankscope looked: that alone hangs the job; resume it with kill -CONT {proc.pid}",
                        None, "stacks", 0, 0, rank)
            )  # fmt: skip
    for rank in diagnosis.missing_ranks if others_there else []:
        out.append(
            Finding(Kind.STACKS, "rank_missing", CULPRIT, str(rank),
                    f"rank {rank} was not found among the job's processes while the others are there",
                    None, "stacks", 0, 2, rank)
        )  # fmt: skip
    return out


def ended_main(frame: Optional[Frame]) -> bool:
    """A main thread in threading's ``_shutdown``: it ended, and a thread it started keeps the process."""
    return frame is not None and frame.function == "_shutdown" and frame.filename.endswith("threading.py")


def _ended_main(frame: Optional[Frame]) -> str:
    if ended_main(frame):
        return (
            " (its main thread has ended, by an uncaught exception or a return, and a non-daemon thread "
            "keeps the process alive: look for its traceback in the job's output)"
        )
    return ""


def _stragglers(report: StacksReport, waiting: bool) -> list[Finding]:
    """Ranks whose progress marker is behind the others' while ranks wait in a collective."""
    steps = {p.rank.rank: p.progress.step for p in report.processes
             if p.rank.rank is not None and p.progress is not None and p.progress.step is not None}  # fmt: skip
    if not waiting or len(set(steps.values())) < 2:
        return []
    lowest = min(steps.values())
    behind = sorted(r for r, step in steps.items() if step == lowest)
    ahead = max(steps.values())
    what = f"{rank_word(behind)} at step {lowest} while other ranks reached step {ahead} (progress markers)"
    return [Finding(Kind.STACKS, "straggler", CULPRIT, str(behind[0]), what, None, "progress markers", 0, 2,
                    behind[0], ranks=str(RankSet.of(behind)))]  # fmt: skip


def fr_findings(gathered: Gathered) -> list[Finding]:
    """The flight recorders' first divergence of each group: the odd ranks out."""
    report = gathered.fr
    if report is None:
        return []
    out = []
    for order, divergence in enumerate(report.divergences):
        suspects = sorted(divergence.suspects)
        side = next((s for s in divergence.sides if set(suspects) & set(s.rank_list)), None)
        where = frame_words(side.call_site) if side is not None else None
        out.append(
            Finding(Kind.WATCHDOG, "collective_desync", CULPRIT, str(suspects[0]) if suspects else None,
                    divergence.text, where, "flight recorders", 0, order,
                    suspects[0] if suspects else None, ranks=str(RankSet.of(suspects)))
        )  # fmt: skip
    pending = [p for g in report.groups for p in g.progress if p.last_enqueued > p.last_completed]
    live = {p.rank.rank for p in gathered.stacks.processes} if gathered.stacks is not None else set()
    # a one-rank job: nothing to wait for but the rank itself (its live stacks say where, when read)
    if report.alone and pending and pending[0].rank not in live:
        last = pending[0]
        what = (
            f"{last.op or 'a collective'} #{last.last_enqueued} never completed, and rank {last.rank} is the "
            "whole job (no other rank to wait for): the rank itself held it, its GPU busy with earlier work "
            "or its own process"
        )
        out.append(
            Finding(Kind.WATCHDOG, "collective_unfinished", CULPRIT, str(last.rank), what,
                    frame_words(last.call_site), "flight recorders", 0, len(out), last.rank,
                    next_step="while it hangs: `rankscope why` (its stacks and its GPU), `rankscope stacks "
                    "--native` (a GPU wait shows as cudaDeviceSynchronize/cuCtxSynchronize)")
        )  # fmt: skip
    return out


def dead_findings(gathered: Gathered) -> list[Finding]:
    """Ranks that ended while the job runs, by their exit status (their launcher has not reaped them)."""
    out = []
    oom_killed = {e.pid for e in gathered.kernel if e.kind == "oom_kill"}
    for dead in gathered.dead:
        who = f"rank {dead.rank}" if dead.rank is not None else "a worker"
        source = f"exit status (/proc/{dead.pid}/stat)"
        if dead.signal is not None:
            name = signal_name(dead.signal)
            cause = name.lower()
            role = VICTIM if dead.signal == signals_module.SIGTERM else CULPRIT
            what = f"{who} (pid {dead.pid}) was killed by {name}"
            step = KILLED_STEP if dead.signal == signals_module.SIGKILL else ""
            if step:  # the kernel's OOM line for this pid settles who sent it
                sender = (
                    "sent by the kernel's OOM killer"
                    if dead.pid in oom_killed
                    else "the OOM killer or the scheduler"
                )
                what += f" ({sender})"
            order = 0
        else:
            code = dead.exit_code or 0
            cause = "exit_code" if code else "exited_early"
            role = CULPRIT
            what = f"{who} (pid {dead.pid}) exited with code {code} while the job runs"
            step, order = "", 1
        out.append(
            Finding(Kind.LAUNCHER, cause, role, str(dead.rank) if dead.rank is not None else f"pid={dead.pid}",
                    what, None, source, 0, order, dead.rank, next_step=step)
        )  # fmt: skip
    return out


def kernel_findings(gathered: Gathered) -> list[Finding]:
    """Kernel messages about the job's processes (by pid), and NVIDIA Xids (a GPU serves the node)."""
    out = []
    for event in gathered.kernel:
        rank = gathered.pid_rank.get(event.pid) if event.pid is not None else None
        mine = event.pid is not None and (rank is not None or event.pid in gathered.pid_rank)
        time = event.time if event.time and event.time[0].isdigit() and "-" in event.time else None
        who = str(rank) if rank is not None else (f"pid={event.pid}" if event.pid else None)
        if event.kind == "oom_kill" and mine:
            what = f"the kernel's OOM killer killed rank {rank} (pid {event.pid}): {event.text}"
            out.append(Finding(Kind.KERNEL, "oom_kill", CULPRIT, who, what, None, "kernel messages", event.line,
                               event.line, rank, time, next_step="host memory: fewer workers, smaller batches "
                               "or prefetch, or more memory per task"))  # fmt: skip
        elif event.kind == "segfault" and mine:
            out.append(Finding(Kind.KERNEL, "segfault", CULPRIT, who, f"rank {rank}: {event.text}", None,
                               "kernel messages", event.line, event.line, rank, time))  # fmt: skip
        elif event.kind == "xid" and event.xid is not None and (mine or event.pid is None or rank is None):
            if event.pid is not None and not mine and gathered.pid_rank:
                continue  # another job's process on a shared GPU node
            cause = "gpu_ecc" if event.xid in XID_ECC else "gpu_xid"
            role = VICTIM if event.xid in XID_CONSEQUENCE else CULPRIT
            what = f"NVIDIA Xid {event.xid}: {xid_words(event.xid)}" + (
                f" (rank {rank}, pid {event.pid})" if rank is not None else ""
            )
            out.append(Finding(Kind.KERNEL, cause, role, who, what, None, "kernel messages", event.line,
                               event.line, rank, time,
                               next_step=xid_step(event.xid)))  # fmt: skip
    return out


def file_findings(gathered: Gathered) -> list[Finding]:
    """A rank's own crash dump (faulthandler on a fatal signal), torchelastic error files, cores."""
    out = []
    for item in gathered.rank_files:
        who = str(item.rank) if item.rank is not None else None
        if item.kind == "crash":
            out.append(Finding(Kind.NATIVE_CRASH, "fatal_signal", CULPRIT, who,
                               f"rank {item.rank} died of a fatal signal: {item.what}".strip(": "), item.location,
                               f"crash file {item.path}", 0, 0, item.rank))  # fmt: skip
        elif item.kind == "error_file":
            out.append(Finding(Kind.TRACEBACK, "python_exception", CULPRIT, who, item.what, item.location,
                               f"torchelastic error file {item.path}", 0, 0, item.rank, item.time))  # fmt: skip
    for core in gathered.cores:
        if core.signal is None:
            continue
        rank = core.rank if core.rank is not None else gathered.pid_rank.get(core.pid or -1)
        what = f"{rank_word([rank]) if rank is not None else core.program} dumped core on {signal_name(core.signal)}"
        out.append(Finding(Kind.NATIVE_CRASH, "native_crash", CULPRIT, str(rank) if rank is not None else None,
                           what, None, f"core {core.path}", 0, 1, rank,
                           next_step=f"rankscope core bt {core.path}"))  # fmt: skip
    return out


def gpu_findings(gathered: Gathered) -> list[Finding]:
    """A GPU with uncorrected ECC errors since the driver loaded (nvidia-smi -q -x), blamed on the
    ranks whose processes run on it (every rank of the node when it does not say)."""
    out = []
    for gpu in gathered.gpus:
        if not gpu.ecc_uncorrected:
            continue
        ranks = sorted({gathered.pid_rank[p] for p in gpu.pids if p in gathered.pid_rank})
        what = (
            f"GPU {gpu.index} on {gpu.host} has {gpu.ecc_uncorrected} uncorrected ECC "
            f"error{'s' if gpu.ecc_uncorrected > 1 else ''} since the driver loaded"
            + (f"; {rank_word(ranks)} run{'s' if len(ranks) == 1 else ''} on it" if ranks else "")
        )
        out.append(Finding(Kind.KERNEL, "gpu_ecc", CULPRIT, str(ranks[0]) if ranks else gpu.host, what, None,
                           f"{gpu.source} on {gpu.host}", 0, 50, ranks[0] if ranks else None,
                           ranks=str(RankSet.of(ranks)) if ranks else None,
                           next_step="drain the node and reset the GPU (nvidia-smi -r) or replace it; "
                           "nvidia-smi -q -d ECC,ROW_REMAPPER"))  # fmt: skip
    return out


def all_findings(gathered: Gathered) -> list[Finding]:
    if gathered.merged:
        return [*gathered.node_findings, *fr_findings(gathered), *stacks_findings(gathered)]
    dead = dead_findings(gathered)
    logs = gathered.log_findings
    if gathered.fr is not None and gathered.fr.alone:  # a one-rank job: no rank to wait for
        from dataclasses import replace

        from rankscope.logs.line_evidence import NEVER_JOINED

        logs = [
            replace(f, what=f.what.replace(NEVER_JOINED, "no other rank to wait for (a one-rank job)"))
            if f.cause == "watchdog_timeout"
            else f
            for f in logs
        ]
    read = {(f.source, f.line) for f in logs if f.kind == Kind.NATIVE_CRASH}  # the log's reader found it too
    fatal = [
        f for f in fatal_findings(gathered.fatal_dumps, [*logs, *dead]) if (f.source, f.line) not in read
    ]
    return [
        *logs,
        *fatal,
        *file_findings(gathered),
        *kernel_findings(gathered),
        *gpu_findings(gathered),
        *dead,
        *fr_findings(gathered),
        *stacks_findings(gathered),
    ]
