"""Dump every target's stacks with py-spy: in parallel, under deadlines, failures kept as data.

Safety: a process that was running before rankscope looked is running after it. py-spy
pauses a process while it reads it; if py-spy is killed at its deadline the kernel
detaches it, and a stop signal left pending could leave the target stopped. Every target
is checked afterwards and, if rankscope left it stopped, continued with SIGCONT. A process
that was already stopped (someone sent SIGSTOP) is left alone and reported as such.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional, Protocol

from rankscope import procfs
from rankscope.model import Failure, FailureKind, Frame, ProcessSnapshot, RankId, Stage
from rankscope.stacks.pstate import ensure_running
from rankscope.stacks.pyspy_cmd import DEFAULT_TIMEOUT, default_parallelism, dump_argv, pyspy_env
from rankscope.stacks.runner import Run, Runner

# What explains a failed dump (the duration's words, the ptrace refusal read from /proc) and the retry's
# jitter are imported when a dump fails: a node's raw answer (rankscope.stacks.node) counts every import.
# py-spy's reader (json, its patterns) is imported when the first dump is in, while the others run
# (rankscope.stacks.local imports it beside them first).


@dataclass(frozen=True)
class Target:
    pid: int
    rank: RankId
    cmdline: str = ""

    @property
    def label(self) -> str:
        return f"pid {self.pid}" + (f" (rank {self.rank.rank})" if self.rank.rank is not None else "")

    def failure(self, stage: Stage, reason: str, hint: str, kind: FailureKind) -> Failure:
        """What went wrong with this target, labelled with its pid and rank."""
        return Failure(self.label, stage, reason, hint, self.rank, kind)


@dataclass
class DumpOutcome:
    target: Target
    snapshot: Optional[ProcessSnapshot] = None
    failure: Optional[Failure] = None
    raw: bytes = b""
    seconds: float = 0.0
    #: Process state letter before the dump (R, S, D, T, Z ...); '?' when unknown.
    state_before: str = "?"
    #: True when rankscope found the process stopped after its dump and sent SIGCONT.
    resumed: bool = False
    #: Dumps tried again because another py-spy / rankscope held the process (see RETRY_WAITS).
    retries: int = 0
    #: Who held it the last time it was refused (a tracer's name and pid).
    held_by: str = ""
    #: Dumped through an in-process handler: the job's rankscope's protocol (docs/inproc.md).
    handler_version: Optional[int] = None


def precheck(target: Target) -> tuple[Optional[Failure], str]:
    """Failures knowable without ptrace (gone, zombie, not Python), and the state letter."""
    entry = procfs.process(target.pid)
    if entry is None:
        return target.failure(
            Stage.DISCOVER,
            "no such process (it exited or never existed)",
            "check the pid with ps; a rank that exited early is in the job's log",
            FailureKind.GONE,
        ), "?"
    if entry.state in ("Z", "X"):
        return target.failure(
            Stage.ATTACH,
            f"the process is a zombie: it exited and its parent (pid {entry.ppid}) has not reaped it",
            "this rank died; read its exit status and last log lines",
            FailureKind.ZOMBIE,
        ), entry.state
    if entry.is_python is False:
        name = target.cmdline.split(" ", 1)[0].rsplit("/", 1)[-1] or "?"
        return target.failure(
            Stage.ATTACH,
            f"not a Python process ({name})",
            "point --pid at the job's launcher or a Python worker",
            FailureKind.NOT_PYTHON,
        ), entry.state
    return None, entry.state


#: Waits (seconds) before the retries of a dump refused because another py-spy or rankscope held the
#: process: several `stacks` runs at once each hold a rank for a few ms to a few hundred ms. Each
#: wait gets up to half of it again at random, so runs that collided do not collide again.
RETRY_WAITS = (0.2, 0.5)
#: A retry starts only if this much of the target's --timeout (and of --deadline) is left after its wait.
RETRY_MIN_RUN = 0.5


def _interpret(
    outcome: DumpOutcome,
    run: Optional[Run],
    error: Optional[OSError],
    intern: dict[Frame, Frame],
    timeout: float,
) -> bool:
    """Fill ``outcome`` from a finished py-spy run (or the error that kept it from starting).

    ``timeout`` is --timeout: a run given less had only what was left of the overall deadline.
    Returns True when the attach was refused by a transient holder (another py-spy or rankscope,
    or a tracer already gone): a retry may succeed.
    """
    target = outcome.target
    if run is None:
        reason = f"could not run py-spy: {error}"
        outcome.failure = target.failure(Stage.DUMP, reason, "reinstall py-spy", FailureKind.MISSING_TOOL)
        return False
    outcome.seconds = run.seconds
    if run.timed_out:
        from rankscope.folding import duration

        given = run.deadline - run.started
        if timeout - given > 1e-3:  # cut short by --deadline
            reason = f"py-spy did not finish within {duration(given)}s, what was left of --deadline"
            hint = "raise --deadline (or --jobs), or narrow the targets"
        else:
            reason = f"py-spy did not finish within {duration(given)}s"
            hint = "raise --timeout (a process under heavy load or --native symbol loading is slow)"
        outcome.failure = target.failure(Stage.DUMP, reason, hint, FailureKind.TIMED_OUT)
        return False
    if run.returncode == 0:
        from rankscope.stacks.pyspy import parse_dump

        outcome.raw = run.stdout
        try:
            threads = parse_dump(outcome.raw, target.pid, intern)
            outcome.snapshot = ProcessSnapshot(
                pid=target.pid, rank=target.rank, threads=threads, cmdline=target.cmdline
            )
        except ValueError as exc:
            outcome.failure = target.failure(
                Stage.PARSE,
                f"unreadable py-spy output: {exc}",
                "rerun with --out DIR to keep the raw dump",
                FailureKind.BAD_OUTPUT,
            )
        return False
    from rankscope.stacks.pyspy import classify_error

    outcome.raw = run.stderr
    kind, reason = classify_error(outcome.raw.decode("utf-8", "replace"))
    if kind == "permission":
        # The real cause, read from /proc: another tracer, ownership, yama, capability, not Python.
        from rankscope.stacks.permissions import explain_refusal, tracer_of

        entry = procfs.process(target.pid)
        tracer = tracer_of(target.pid)
        refusal = explain_refusal(
            target.pid, is_python=entry.is_python if entry is not None else None, tracer=tracer
        )
        reason = refusal.reason
        if outcome.retries:
            reason += f" (still, after {outcome.retries} {'retry' if outcome.retries == 1 else 'retries'})"
        outcome.failure = target.failure(Stage.ATTACH, reason, refusal.hint, refusal.kind)
        if refusal.transient:
            outcome.held_by = (
                tracer[1] if tracer is not None else "a tracer that had detached when rankscope looked"
            )
        return refusal.transient
    hint = {
        "gone": "the rank exited while rankscope looked; its log says why",
        "not-python": "point --pid at the job's launcher or a Python worker",
    }.get(kind, "rerun with --debug, or run py-spy dump --pid PID yourself")
    stage = Stage.ATTACH if kind == "not-python" else Stage.DUMP
    outcome.failure = target.failure(stage, reason, hint, FailureKind(kind))
    return False


def _not_started(target: Target) -> Failure:
    return target.failure(
        Stage.DUMP,
        "not started: the overall deadline passed",
        "raise --deadline or narrow the targets",
        FailureKind.TIMED_OUT,
    )


class Stop(Protocol):
    """A stop request (rankscope.lifetime.StopSignals): the first signal, and a pipe readable after it."""

    @property
    def signum(self) -> Optional[int]: ...

    @property
    def fd(self) -> int: ...

    @property
    def name(self) -> str: ...


def _interrupted(target: Target, stop: Stop) -> Failure:
    return target.failure(
        Stage.INTERRUPTED,
        f"not dumped: {stop.name} stopped the run",
        "run again and let it finish",
        FailureKind.OTHER,
    )


def collect(
    targets: Sequence[Target],
    pyspy: str,
    native: bool = False,
    with_locals: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: Optional[float] = None,
    parallelism: Optional[int] = None,
    progress: Optional[Callable[[int, int], None]] = None,
    stop: Optional[Stop] = None,
) -> list[DumpOutcome]:
    """Dump every target once, at most ``parallelism`` at a time. ``deadline`` is a time.monotonic() instant.

    After a stop signal (``stop``), dumps still running are killed, none is started, and each of
    their targets gets an ``interrupted`` failure (and is left running, as always).
    """
    intern: dict[Frame, Frame] = {}
    total = len(targets)
    limit = max(1, parallelism or default_parallelism())
    runner = Runner(pyspy_env())
    outcomes = [DumpOutcome(target=t) for t in targets]
    owner: dict[Run, DumpOutcome] = {}
    queue = outcomes[::-1]  # popped from the end: targets in their given order
    done = 0

    def finished(outcome: DumpOutcome) -> None:
        nonlocal done
        outcome.resumed = ensure_running(outcome.target.pid, outcome.state_before)
        done += 1
        if progress is not None:
            progress(done, total)

    #: (when to start, outcome) of dumps to try again; and when each target's --timeout budget ends.
    later: list[tuple[float, DumpOutcome]] = []
    budget_end: dict[int, float] = {}

    def retry(outcome: DumpOutcome) -> bool:
        """Queue ``outcome`` for another try after a short wait, if retries and time are left."""
        if outcome.retries >= len(RETRY_WAITS):
            return False
        import random

        wait = RETRY_WAITS[outcome.retries] * (1 + random.random() / 2)
        start = time.monotonic() + wait
        if start + RETRY_MIN_RUN > budget_end[id(outcome)]:
            return False
        outcome.retries += 1
        outcome.failure, outcome.raw = None, b""
        later.append((start, outcome))
        return True

    while queue or owner or later:
        if stop is not None and stop.signum:
            for run, outcome in list(owner.items()):
                runner.kill(run)
                del owner[run]
                queue.append(outcome)
            for outcome in [*queue, *(o for _, o in later)]:
                outcome.failure = _interrupted(outcome.target, stop)
                if outcome.state_before == "?":  # never looked at: nothing of rankscope's to undo
                    done += 1
                else:
                    finished(outcome)
            break
        now = time.monotonic()
        for item in [i for i in later if i[0] <= now]:
            later.remove(item)
            queue.append(item[1])  # popped next: a retry goes first
        if not queue and not owner and later:
            time.sleep(max(0.0, min(start for start, _ in later) - now))
            continue
        while queue and len(owner) < limit:
            outcome = queue.pop()
            target = outcome.target
            failure, outcome.state_before = precheck(target)
            now = time.monotonic()
            if id(outcome) not in budget_end:
                budget_end[id(outcome)] = now + timeout if deadline is None else min(now + timeout, deadline)
            remaining = budget_end[id(outcome)] - now
            if failure is None and remaining <= 0:
                failure = _not_started(target)
            if failure is not None:
                outcome.failure = failure
                finished(outcome)
                continue
            try:
                argv = dump_argv(pyspy, target.pid, native, with_locals)
                run = runner.spawn(argv, remaining, target.pid, outcome.state_before)
            except OSError as exc:
                _interpret(outcome, None, exc, intern, timeout)
                finished(outcome)
                continue
            owner[run] = outcome
        if owner:
            until = min((start for start, _ in later), default=None)
            for run in runner.wait(until, stop.fd if stop is not None else -1):
                mine = owner.pop(run, None)
                if mine is not None:
                    if _interpret(mine, run, None, intern, timeout) and retry(mine):
                        continue
                    finished(mine)
    return outcomes
