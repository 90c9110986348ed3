"""`rankscope core check`: will a crash here leave a core, where, and the commands that make it so.

The node is read through the doctor's readers (rankscope.doctor.system.System) and where cores go
is the doctor's own verdict (rankscope.doctor.checks.core_destination): one reading, one wording.
This adds what `core check` needs beyond the doctor's line: whether the directory is writable, and
the fix as commands for this shell, for good (limits.conf, sysctl.d) and for a job's launcher line.
Nothing here changes the node.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.doctor.checks import CoreRisk, core_destination, core_risks
from rankscope.doctor.facts import Limits, core_handler_installed, core_handler_running
from rankscope.doctor.report import Status
from rankscope.doctor.system import System

#: The pattern the fix suggests: an absolute directory, program, pid, host and time in the name.
SUGGESTED_PATTERN = "/tmp/cores/core.%e.%p.%h.%t"


@dataclass
class CoreSetup:
    """What the node does with a crashing process's memory, read (never changed)."""

    SCHEMA: ClassVar[str] = "rankscope.core.check/1"

    soft_limit: int
    hard_limit: int
    core_pattern: Optional[str]
    core_uses_pid: bool
    #: Where cores go, in words (the doctor's wording).
    where: str
    #: The directory cores land in when the pattern is a path (None: cwd of the process, or a pipe).
    directory: Optional[str] = None
    directory_writable: Optional[bool] = None
    #: A program the kernel pipes cores to (systemd-coredump, apport), when it does.
    pipe_program: Optional[str] = None
    #: True when a crash now would leave a core somewhere rankscope core list looks.
    will_dump: bool = False
    problems: list[str] = field(default_factory=list)
    #: Commands that fix each problem: for this shell, for good, for a job.
    fix_shell: list[str] = field(default_factory=list)
    fix_persistent: list[str] = field(default_factory=list)
    fix_job: list[str] = field(default_factory=list)
    #: Settings that lose or hide cores (shared with the doctor's core-dumps check).
    risks: list[CoreRisk] = field(default_factory=list)


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def read_setup(system: Optional[System] = None) -> CoreSetup:
    system = system or System.real()
    soft, hard = system.rlimit(resource.RLIMIT_CORE)
    pattern = system.read("/proc/sys/kernel/core_pattern")
    uses_pid = system.read("/proc/sys/kernel/core_uses_pid") == "1"
    status, where, _fix = core_destination(pattern, uses_pid)
    setup = CoreSetup(soft, hard, pattern, uses_pid, where)
    setup.risks = core_risks(
        pattern,
        uses_pid,
        Limits(soft, hard),
        system.exists("/.dockerenv") or system.exists("/run/.containerenv"),
        os.access(os.getcwd(), os.W_OK | os.X_OK),
        core_handler_installed(system, pattern),
        core_handler_running(system, pattern),
    )
    if pattern and pattern.startswith("|"):
        words = pattern[1:].split()
        setup.pipe_program = words[0] if words else None
    elif pattern and pattern.startswith("/"):
        setup.directory = pattern.rsplit("/", 1)[0] or "/"
        setup.directory_writable = os.access(system.path(setup.directory), os.W_OK | os.X_OK)
    return judge(setup, status)


def judge(setup: CoreSetup, where_status: Status = Status.PASS) -> CoreSetup:
    """Problems and their fixes, from what was read (pure)."""
    fix_pattern_shell = (
        f"sudo mkdir -p {SUGGESTED_PATTERN.rsplit('/', 1)[0]} && sudo chmod 1777 /tmp/cores && "
    )
    fix_pattern_shell += f"sudo sysctl -w kernel.core_pattern={SUGGESTED_PATTERN}"
    fix_pattern_persistent = (
        f"echo 'kernel.core_pattern = {SUGGESTED_PATTERN}' | sudo tee /etc/sysctl.d/60-core-pattern.conf "
        "&& sudo sysctl --system"
    )
    if setup.soft_limit == 0:
        setup.problems.append("ulimit -c is 0: a crashing process writes no core")
        if setup.hard_limit == 0:
            setup.problems.append(
                "the hard limit is 0 too: only root (or limits.conf at the next login) raises it"
            )
            setup.fix_persistent.append(
                "echo '* hard core unlimited' | sudo tee /etc/security/limits.d/90-core.conf   # next login"
            )
            setup.fix_job.append(
                "docker run --ulimit core=-1 ...   # in a container: the runtime sets the limit"
            )
        setup.fix_shell.append("ulimit -c unlimited")
        setup.fix_persistent.append(
            "echo '* soft core unlimited' | sudo tee -a /etc/security/limits.d/90-core.conf   # next login"
        )
        setup.fix_job.append(
            "ulimit -c unlimited; torchrun ...   # in the job script, before the launcher (srun passes it on)"
        )
    if setup.pipe_program and "systemd-coredump" not in setup.pipe_program:
        setup.problems.append(f"cores are piped to {setup.pipe_program}: {setup.where}")
        setup.fix_shell.append(fix_pattern_shell)
        setup.fix_persistent.append(fix_pattern_persistent)
    if setup.directory is not None and setup.directory_writable is False:
        setup.problems.append(
            f"{setup.directory} does not exist or is not writable: the kernel drops the core"
        )
        setup.fix_shell.append(f"sudo mkdir -p {setup.directory} && sudo chmod 1777 {setup.directory}")
    for risk in setup.risks:
        if risk.problem.startswith("ulimit -c is 0"):
            continue  # said above, with its commands
        setup.problems.append(risk.problem)
        setup.fix_shell.append(risk.fix)
    if setup.core_pattern is None:
        setup.problems.append("kernel.core_pattern could not be read")
    setup.will_dump = (
        setup.soft_limit != 0
        and setup.core_pattern is not None
        and where_status != Status.FAIL
        and all(risk.status != Status.FAIL for risk in setup.risks)
    )
    if setup.directory is not None and setup.directory_writable is False:
        setup.will_dump = False
    return setup


def render(setup: CoreSetup) -> str:
    verdict = "no"
    if setup.will_dump:
        verdict = "yes, but see the problems below" if setup.problems else "yes"
    lines = [
        f"a crash here leaves a core: {verdict}",
        f"  ulimit -c: soft {_limit(setup.soft_limit)}, hard {_limit(setup.hard_limit)}",
        f"  kernel.core_pattern = {setup.core_pattern}"
        + (" (core_uses_pid=1: .PID appended)" if setup.core_uses_pid else ""),
        f"  {setup.where}",
    ]
    if setup.directory is not None:
        lines.append(f"  {setup.directory}: {'writable' if setup.directory_writable else 'NOT writable'}")
    for problem in setup.problems:
        lines.append(f"problem: {problem}")
    for title, commands in (
        ("fix for this shell", setup.fix_shell),
        ("fix for good", setup.fix_persistent),
        ("fix for a job", setup.fix_job),
    ):
        if commands:
            lines.append(f"{title}:")
            lines.extend(f"  {command}" for command in commands)
    return "\n".join(lines)
