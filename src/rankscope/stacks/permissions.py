"""Why the kernel refuses ptrace here, and the exact fix (with its security cost).

A refusal has one of several causes, and the fix differs for each: another tracer already
holds the process (the kernel allows one tracer at a time; /proc/PID/status names it in
TracerPid), the process belongs to another user, kernel.yama.ptrace_scope forbids it, this
root lacks CAP_SYS_PTRACE, or the process is not a Python interpreter at all. The cause is
read from /proc before any advice is given: a root who holds the capability is never told
to grant it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from rankscope import procfs
from rankscope.model import FailureKind
from rankscope.procfs import has_cap_sys_ptrace, yama_ptrace_scope
from rankscope.procs import is_rankscope

NOTHING_FORBIDS = "nothing here forbids it"
_SCOPE_MEANING = {
    1: "only a parent may trace its children",
    2: "only CAP_SYS_PTRACE may trace",
    3: "nobody may trace",
}


@dataclass(frozen=True)
class Refusal:
    """A ptrace refusal explained: what kind of failure it is, why, and what to do."""

    kind: FailureKind
    reason: str
    hint: str
    #: The holder is likely gone in a moment: a py-spy (of another rankscope, say) that dumps the
    #: process, or a tracer that had already detached when /proc was read. Worth a retry.
    transient: bool = False


def is_transient_tracer(who: str) -> bool:
    """Whether a tracer (``tracer_of``'s description) only holds a process for a dump: a py-spy or
    anything another rankscope started."""
    return who.startswith("py-spy ") or "of another rankscope" in who


def tracer_of(pid: int) -> Optional[tuple[int, str]]:
    """(pid, description) of the process that ptrace-holds ``pid`` (TracerPid); ``None`` when nobody does.

    The description is the tracer's name and pid, e.g. ``strace (pid 1234)``, or
    ``py-spy (pid 1234) of another rankscope (pid 1200)``.
    """
    tracer = procfs.tracer_pid(pid)
    if not tracer:
        return None
    entry = procfs.process(tracer)
    if entry is None:
        return tracer, f"pid {tracer} (which has exited since)"
    parent = procfs.process(entry.ppid) if entry.ppid else None
    if parent is not None and is_rankscope(parent):
        return tracer, f"{entry.comm} (pid {tracer}) of another rankscope (pid {parent.pid})"
    return tracer, f"{entry.comm} (pid {tracer})"


def already_traced(who: str) -> Refusal:
    """The refusal for a process that ``who`` (a tracer's name and pid) already traces."""
    return Refusal(
        FailureKind.ALREADY_TRACED,
        f"already traced by {who}: the kernel allows one tracer at a time",
        f"wait for {who} to finish or stop it, then rerun",
        transient=is_transient_tracer(who),
    )


def explain_refusal(
    pid: int,
    is_python: Optional[bool] = None,
    target_uid: Optional[int] = None,
    tracer: Optional[tuple[int, str]] = None,
) -> Refusal:
    """Why ptrace of ``pid`` was refused, from its real cause, in order of certainty.

    ``is_python``, ``target_uid`` and ``tracer`` default to what /proc says now; tests pass them.
    """
    if tracer is None:
        tracer = tracer_of(pid)
    if tracer is not None and tracer[0] != os.getpid():
        return already_traced(tracer[1])
    if is_python is False:
        return Refusal(
            FailureKind.NOT_PYTHON,
            "not a Python process, and ptrace was refused",
            "point --pid at the job's launcher or a Python worker",
        )
    if target_uid is None:
        target_uid = procfs.uid(pid)
    hint = explain_ptrace_denied(target_uid, pid=pid)
    reason = "ptrace was refused (permission denied)"
    if is_python is None:
        reason += "; its executable and memory maps cannot be read either, so it may not be Python at all"
        hint = f"check that pid {pid} is a Python worker (ps -o pid,comm,args -p {pid}); {hint}"
    # Nothing here forbids it: a tracer held it at that moment and has detached since (likely another
    # `stacks` run), or a policy refuses it; a retry tells which.
    return Refusal(FailureKind.PERMISSION, reason, hint, transient=hint.startswith(NOTHING_FORBIDS))


def explain_ptrace_denied(
    target_uid: Optional[int] = None,
    euid: Optional[int] = None,
    scope: Optional[int] = None,
    cap: Optional[bool] = None,
    pid: Optional[int] = None,
) -> str:
    """One sentence: why ptrace was refused and what to do about it.

    ``euid``, ``scope`` and ``cap`` default to this process's; tests pass them to reach each branch.
    """
    euid = os.geteuid() if euid is None else euid
    scope = yama_ptrace_scope() if scope is None else scope
    cap = has_cap_sys_ptrace() if cap is None else cap
    reasons = []
    if euid != 0 and target_uid is not None and target_uid != euid:
        reasons.append(
            f"the process belongs to uid {target_uid} ({user_name(target_uid)}), you are uid {euid}"
        )
    if scope is not None and scope >= 1 and not cap:
        reasons.append(f"kernel.yama.ptrace_scope={scope} ({_SCOPE_MEANING.get(scope, 'restricted')})")
    if euid == 0 and not cap:
        reasons.append("this root has no CAP_SYS_PTRACE (a container without --cap-add SYS_PTRACE?)")
    if not reasons:
        # Nothing here forbids it: not ownership, not yama, not the capability.
        return (
            f"{NOTHING_FORBIDS} (owner, ptrace_scope and CAP_SYS_PTRACE are fine): another tracer "
            "(py-spy, gdb, strace, another rankscope) probably held it at that moment, or a seccomp or LSM "
            f"policy (AppArmor, SELinux) denies ptrace. Fix: rerun; if it persists, check TracerPid in "
            f"/proc/{pid if pid is not None else 'PID'}/status and the container's security policy"
        )
    why = "; ".join(reasons)
    if scope == 3:
        fix = "ptrace_scope=3 can only be lowered by a reboot; ask the admin"
    elif euid != 0:
        fix = "rerun with sudo (sudo env PATH=$PATH rankscope ...) or as the process owner"
        if scope is not None and scope >= 1:
            fix += (
                ", or let users trace their own processes: sudo sysctl -w kernel.yama.ptrace_scope=0 "
                "(security: any process of a user can then read that user's other processes)"
            )
    else:
        fix = "grant CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE, or the pod's securityContext)"
    return f"{why}. Fix: {fix}"


def user_name(uid: int) -> str:
    """The login name of ``uid``, or ``"no user name"`` when the passwd database has none."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return "no user name"


def unreadable_job(owners: dict[int, list[int]], launchers: list[tuple[str, int]]) -> tuple[str, str]:
    """(reason, hint) for Python processes found whose environments this user cannot read.

    ``owners`` maps each uid to the pids found; ``launchers`` are (kind, pid) of the launchers above them.
    """
    euid = os.geteuid()
    parts = []
    for uid, pids in sorted(owners.items()):
        noun = "process" if len(pids) == 1 else "processes"
        parts.append(f"{len(pids)} Python {noun} of uid {uid} ({user_name(uid)})")
    under = ""
    if launchers:
        under = " under " + ", ".join(f"{kind} pid {pid}" for kind, pid in launchers)
    reason = (
        f"no job of yours found, but {' and '.join(parts)}{under} whose environment you (uid {euid}) "
        "cannot read, so their ranks are unknown"
    )
    hint = "run as root (sudo env PATH=$PATH rankscope stacks ...)"
    others = [uid for uid in sorted(owners) if uid != 0]
    if others:
        names = [(user_name(uid), uid) for uid in others]
        hint += " or as " + " or ".join(
            f"uid {uid}" if name == "no user name" else f"{name} (uid {uid})" for name, uid in names
        )
    return reason, hint
