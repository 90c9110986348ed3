"""Attach strace to processes for a few seconds, detach, and summarise what they did.

One ``strace -f -p PID -T -tt -qq -o FILE`` per process, all at once, each started through
rankscope.lifetime: at the deadline (or on SIGINT/SIGTERM to rankscope) each gets SIGTERM, on which
strace detaches and the traced process runs on. Its output goes to a private temporary directory
(strace's own ``-o``), read after it ended. A process left stopped is continued
(rankscope.stacks.pstate's rule). When rankscope is killed (SIGKILL included) the guardian ends
every strace the same way, continues a target left stopped and removes the directory.

Full output, not ``-c``: ``-c`` counts calls but says neither what a thread is blocked on nor
which paths failed, and a second ``-c`` pass would double the time the process is held.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from rankscope import lifetime, procfs
from rankscope.errors import BadInputError, MissingToolError, RankscopeError
from rankscope.inspect.collect import PermissionDeniedError, living, process_fds
from rankscope.inspect.report import Blocked, ProcessTrace
from rankscope.inspect.syscalls import describe_restart, summarise
from rankscope.model import Failure, FailureKind, RankId, Stage
from rankscope.procs import ProcessTarget
from rankscope.stacks.permissions import already_traced, explain_refusal, tracer_of
from rankscope.stacks.pstate import ensure_running, proc_state


@dataclass
class _Running:
    pid: int
    rank: Optional[RankId]
    child: lifetime.Child
    output: str
    state_before: str


def strace_argv(pid: int, output: str) -> list[str]:
    return ["strace", "-f", "-p", str(pid), "-T", "-tt", "-qq", "-o", output]


def _seconds_of_day(now: float) -> float:
    local = time.localtime(now)
    return local.tm_hour * 3600 + local.tm_min * 60 + local.tm_sec + (now % 1)


def check_target(pid: int) -> None:
    """Raise the one-line error for a process strace cannot attach to: gone, another tracer, another user."""
    living(pid, "strace")
    tracer = tracer_of(pid)
    if tracer is not None and tracer[0] != os.getpid():
        refusal = already_traced(tracer[1])
        raise PermissionDeniedError(f"pid {pid} is {refusal.reason}", refusal.hint)
    owner = procfs.uid(pid)
    if os.geteuid() != 0 and owner is not None and owner != os.geteuid():
        refusal = explain_refusal(pid, target_uid=owner)
        raise PermissionDeniedError(f"cannot trace pid {pid}: {refusal.reason}", refusal.hint)


def trace(
    targets: Sequence[ProcessTarget], seconds: float, stop_fd: Optional[int] = None
) -> tuple[list[ProcessTrace], list[Failure]]:
    """Trace every target for ``seconds`` (at once); (traces, failures).

    With one target its error is raised (one line, its exit code); with several each becomes a
    :class:`Failure`. ``stop_fd`` (rankscope.lifetime.StopSignals.fd) ends the wait early.
    """
    if shutil.which("strace") is None:
        raise MissingToolError("strace", "install it: apt-get install strace (or dnf install strace)")
    failures: list[Failure] = []
    runnable = []
    for pid, rank in targets:
        try:
            check_target(pid)
            runnable.append((pid, rank))
        except RankscopeError as exc:
            if len(targets) == 1:
                raise
            failures.append(_failure(pid, rank, exc))
    with lifetime.private_tempdir("rankscope-strace-") as scratch:
        running: list[_Running] = []
        try:
            running = [_start(pid, rank, scratch, seconds) for pid, rank in runnable]
            started = time.monotonic()
            lifetime.wait([item.child for item in running], -1 if stop_fd is None else stop_fd)
            ended_at = _seconds_of_day(time.time())
        finally:
            for item in running:
                item.child.__exit__()
        traced = time.monotonic() - started
        traces = []
        for item in running:
            try:
                traces.append(_summarise(item, traced, ended_at))
            except RankscopeError as exc:
                if len(targets) == 1:
                    raise
                failures.append(_failure(item.pid, item.rank, exc))
    return traces, failures


def _failure(pid: int, rank: Optional[RankId], exc: RankscopeError) -> Failure:
    kind = FailureKind.PERMISSION if isinstance(exc, PermissionDeniedError) else FailureKind.GONE
    return Failure(f"pid {pid}", Stage.ATTACH, exc.message, exc.hint, rank, kind)


def _start(pid: int, rank: Optional[RankId], scratch: str, seconds: float) -> _Running:
    output = os.path.join(scratch, f"{pid}.strace")
    state_before = proc_state(pid)[0]
    lifetime.note_target(pid, state_before)
    child = lifetime.start(strace_argv(pid, output), seconds, capture=1 << 20)
    return _Running(pid, rank, child, output, state_before)


def _named(pid: int, blocked: Blocked) -> Blocked:
    """The thread's name beside its call; a restart_syscall named by the kernel's wait channel."""
    thread = procfs.task_file(pid, blocked.tid, "comm") or ""
    if blocked.syscall != "restart_syscall":
        return dataclasses.replace(blocked, thread=thread)
    on = describe_restart(procfs.task_file(pid, blocked.tid, "wchan"))
    return dataclasses.replace(blocked, thread=thread, on=on)


def _summarise(item: _Running, traced: float, ended_at: float) -> ProcessTrace:
    stderr = item.child.text()
    continued = ensure_running(item.pid, item.state_before)
    lifetime.release_target(item.pid)
    state_after = proc_state(item.pid)[0]
    if "attach:" in stderr or not os.path.exists(item.output):
        if not state_after:
            raise BadInputError(f"pid {item.pid} exited before strace attached")
        refusal = explain_refusal(item.pid)
        raise PermissionDeniedError(
            f"strace could not attach to pid {item.pid}: {stderr.strip().splitlines()[-1] if stderr.strip() else refusal.reason}",
            refusal.hint,
        )
    try:
        fds = process_fds(item.pid, peers=True).by_fd()
        command = " ".join(procfs.cmdline(item.pid))
    except RankscopeError:
        fds, command = {}, ""  # it exited while traced: the trace still says what it did
    with open(item.output, encoding="utf-8", errors="replace") as handle:
        summary = summarise(handle, fds, ended_at)
    blocked = tuple(_named(item.pid, entry) for entry in summary.blocked)
    return ProcessTrace(
        pid=item.pid,
        command=command,
        seconds=traced,
        threads=summary.threads,
        lines=summary.lines,
        syscalls=tuple(summary.syscalls),
        blocked=blocked,
        failures=tuple(summary.failures),
        state_after=state_after or "gone",
        continued=continued,
        rank=item.rank,
    )
