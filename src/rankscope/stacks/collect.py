"""Dump every target's stacks with py-spy: in parallel, under deadlines, failures kept as data.

Safety: a process that was running before rankscope looked is running after it. py-spy
pauses a process while it reads it; if py-spy is killed at its deadline the kernel
detaches it, and a stop signal left pending could leave the target stopped. Every target
is checked afterwards and, if rankscope left it stopped, continued with SIGCONT. A process
that was already stopped (someone sent SIGSTOP) is left alone and reported as such.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

from rankscope.model import Failure, Frame, ProcessSnapshot, RankId
from rankscope.stacks.permissions import explain_ptrace_denied
from rankscope.stacks.pyspy import classify_error, dump_argv, parse_dump, pyspy_env

DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Target:
    pid: int
    rank: RankId
    cmdline: str = ""

    @property
    def label(self) -> str:
        return f"pid {self.pid}" + (f" (rank {self.rank.rank})" if self.rank.rank is not None else "")


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


def proc_state(pid: int) -> tuple[str, int]:
    """(state letter from /proc/PID/stat, TracerPid); ('', 0) when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        state = stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3].decode()
        tracer = 0
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("TracerPid:"):
                    tracer = int(line.split()[1])
                    break
        return state, tracer
    except (OSError, ValueError):
        return "", 0


def _parent_pid(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def looks_like_python(pid: int) -> Optional[bool]:
    """True/False from the process's executable and mapped libraries; None if unreadable."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    if "python" in exe.rsplit("/", 1)[-1]:
        return True
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            maps = handle.read()
    except OSError:
        return None
    return b"libpython" in maps or b"python3" in maps


def _target_uid(pid: int) -> Optional[int]:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def precheck(target: Target) -> tuple[Optional[Failure], str]:
    """Failures knowable without ptrace (gone, zombie, not Python), and the state letter."""
    state, _ = proc_state(target.pid)
    if not state:
        return Failure(
            target.label,
            "discover",
            "no such process (it exited or never existed)",
            "check the pid with ps; a rank that exited early is in the job's log",
            target.rank,
        ), "?"
    if state in ("Z", "X"):
        parent = _parent_pid(target.pid)
        return Failure(
            target.label,
            "attach",
            f"the process is a zombie: it exited and its parent (pid {parent}) has not reaped it",
            "this rank died; read its exit status and last log lines",
            target.rank,
        ), state
    if looks_like_python(target.pid) is False:
        name = target.cmdline.split(" ", 1)[0].rsplit("/", 1)[-1] or "?"
        return Failure(
            target.label,
            "attach",
            f"not a Python process ({name})",
            "point --pid at the job's launcher or a Python worker",
            target.rank,
        ), state
    return None, state


def _ensure_running(pid: int, state_before: str) -> bool:
    """Continue a process rankscope left stopped. Returns True when it had to."""
    if state_before in ("T", "t"):
        return False
    state, tracer = proc_state(pid)
    if state in ("T", "t") and tracer == 0:
        try:
            os.kill(pid, signal.SIGCONT)
            return True
        except OSError:
            return False
    return False


def dump_one(
    target: Target,
    pyspy: str,
    native: bool,
    with_locals: bool,
    timeout: float,
    intern: dict[Frame, Frame],
) -> DumpOutcome:
    started = time.monotonic()
    failure, state = precheck(target)
    outcome = DumpOutcome(target=target, state_before=state)
    if failure is not None:
        outcome.failure = failure
        return outcome
    if timeout <= 0:
        outcome.failure = Failure(
            target.label,
            "dump",
            "not started: the overall deadline passed",
            "raise --deadline or narrow the targets",
            target.rank,
        )
        return outcome
    argv = dump_argv(pyspy, target.pid, native=native, with_locals=with_locals)
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, env=pyspy_env(), check=False)
    except subprocess.TimeoutExpired:
        outcome.failure = Failure(
            target.label,
            "dump",
            f"py-spy did not finish within {timeout:g}s",
            "raise --timeout (a process under heavy load or --native symbol loading is slow)",
            target.rank,
        )
    except OSError as exc:
        outcome.failure = Failure(
            target.label, "dump", f"could not run py-spy: {exc}", "reinstall py-spy", target.rank
        )
    else:
        outcome.raw = proc.stdout
        if proc.returncode == 0:
            try:
                threads = parse_dump(proc.stdout, target.pid, intern)
                outcome.snapshot = ProcessSnapshot(
                    pid=target.pid, rank=target.rank, threads=threads, cmdline=target.cmdline
                )
            except ValueError as exc:
                outcome.failure = Failure(
                    target.label,
                    "parse",
                    f"unreadable py-spy output: {exc}",
                    "rerun with --out DIR to keep the raw dump",
                    target.rank,
                )
        else:
            kind, reason = classify_error(proc.stderr.decode("utf-8", "replace"))
            hint = {
                "permission": explain_ptrace_denied(_target_uid(target.pid)),
                "gone": "the rank exited while rankscope looked; its log says why",
                "not-python": "point --pid at the job's launcher or a Python worker",
            }.get(kind, "rerun with --debug, or run py-spy dump --pid PID yourself")
            stage = "attach" if kind in ("permission", "not-python") else "dump"
            outcome.failure = Failure(target.label, stage, reason, hint, target.rank)
            outcome.raw = proc.stderr
    finally:
        outcome.resumed = _ensure_running(target.pid, state)
        outcome.seconds = time.monotonic() - started
    return outcome


def default_parallelism() -> int:
    return max(4, 2 * (os.cpu_count() or 1))


def collect(
    targets: Sequence[Target],
    pyspy: str,
    native: bool = False,
    with_locals: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: Optional[float] = None,
    parallelism: Optional[int] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> list[DumpOutcome]:
    """Dump every target once, in parallel. ``deadline`` is a time.monotonic() instant."""
    intern: dict[Frame, Frame] = {}
    total = len(targets)
    done = 0

    def task(target: Target) -> DumpOutcome:
        remaining = timeout if deadline is None else min(timeout, deadline - time.monotonic())
        return dump_one(target, pyspy, native, with_locals, remaining, intern)

    outcomes: list[DumpOutcome] = []
    workers = max(1, min(parallelism or default_parallelism(), total or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for outcome in pool.map(task, targets):
            outcomes.append(outcome)
            done += 1
            if progress is not None:
                progress(done, total)
    return outcomes
