"""One kind of finding for every piece of evidence, and the one precedence that decides between them.

A finding says who (the identity as the evidence names it: a rank label, a host, a Ray pid), what
happened, where (the user's code line, NCCL's source line, a native frame, a collective), its cause
id, and its role: ``culprit`` (a candidate root cause), ``victim`` (a consequence of another
failure) or ``handled`` (caught; the process lived on). ``logs errors`` turns every piece of
evidence of a log into findings and asks :func:`decide` for the root cause; a command that weighs
other signals (stacks, flight recorder dumps, cores) does the same with its own findings.

The precedence between kinds of evidence (:data:`PRECEDENCE`), strongest first:

1. ``nccl``: an NCCL WARN saying a CUDA or network call failed *in that process* (``Cuda failure
   'out of memory'``, ``no algorithm/protocol available``, NET/OFI errors): the rank whose own
   call failed, more precise than the Python error it raises afterwards;
2. ``traceback`` and ``exception_line``: the program's own uncaught error (a complete traceback,
   or a rank-prefixed exception line whose header is not in the log);
3. ``native_crash``: a signal backtrace (Open MPI, c10's ``*** Received signal``);
4. ``launcher`` and ``kernel``: a launcher reporting a rank killed by a signal or failed with an
   exit code (SIGKILL: the OOM killer or the scheduler), a rank's exit status read from its
   launcher's unreaped child, or a kernel message about a rank's process or GPU (OOM-killer kill,
   segfault, NVIDIA Xid), weighed together;
5. ``network``: the network failing under a rank (NCCL's ``NET/IB : Got completion from peer ...
   with status=12``): weaker than any death above, which breaks the same connections, and stronger
   than the timeouts it causes;
6. ``watchdog``: collectives that timed out (the ranks named are the ones that waited); a desync
   (different collectives at one sequence number, in the log or the flight recorders); torch's
   pointer to the first rank that timed out;
7. ``stacks``: live stacks of a hung job: ranks elsewhere while the others wait in a collective,
   a rank blocked on its GPU, or every rank in one collective with none to blame;
8. ``cut_traceback``: a traceback the log ends in the middle of (no exception line);
9. ``launcher_summary``: only a launcher's failure summary (every rank exited): the tracebacks are
   elsewhere.

Within one kind the earliest finding wins: by timestamp when any of them carries one, else by
order in the input. Victims and handled findings are never the root cause, nor, where the launcher
restarted the workers, the failures of the attempts before the one that ended the job
(``superseded``) while that attempt has a culprit of its own (more than a launcher's summary).

Shared vocabulary (stdlib only): no room imports are allowed here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

from rankscope.model import Words


class Kind(Words):
    NCCL = "nccl"
    TRACEBACK = "traceback"
    EXCEPTION_LINE = "exception_line"
    NATIVE_CRASH = "native_crash"
    LAUNCHER = "launcher"
    NETWORK = "network"
    WATCHDOG = "watchdog"
    KERNEL = "kernel"
    STACKS = "stacks"
    CUT_TRACEBACK = "cut_traceback"
    LAUNCHER_SUMMARY = "launcher_summary"


CULPRIT = "culprit"
VICTIM = "victim"
HANDLED = "handled"

#: Strongest first; kinds on one row are weighed together (the earliest wins).
PRECEDENCE: tuple[tuple[Kind, ...], ...] = (
    (Kind.NCCL,),
    (Kind.TRACEBACK, Kind.EXCEPTION_LINE),
    (Kind.NATIVE_CRASH,),
    (Kind.LAUNCHER, Kind.KERNEL),
    (Kind.NETWORK,),
    (Kind.WATCHDOG,),
    (Kind.STACKS,),
    (Kind.CUT_TRACEBACK,),
    (Kind.LAUNCHER_SUMMARY,),
)


@dataclass(frozen=True)
class Finding:
    """One piece of evidence, read as who, what, where, cause and role."""

    kind: Kind
    #: A stable id of the cause: ``python_exception``, ``nccl:cuda_oom``, ``watchdog_timeout``,
    #: ``collective_desync``, ``sigkill``, ``native_crash``, ``tracebacks_elsewhere``, ...
    cause: str
    role: str
    #: The identity as the evidence names it (``node7:3``, ``worker-2``, ``pid=2657301``), or None.
    who: Optional[str]
    what: str
    #: The user's code line, NCCL's source line, a native frame or a collective; None if unknown.
    where: Optional[str]
    source: str
    line: int
    #: Position in the input (across files), for "earliest in log order".
    order: int = 0
    global_rank: Optional[int] = None
    time: Optional[str] = None
    #: The exception type, for Python exceptions.
    exception: Optional[str] = None
    #: The ranks the finding is about, folded (the ranks whose watchdog timed out, say).
    ranks: Optional[str] = None
    next_step: str = ""
    #: Whether ``who``'s number is a launcher's local rank (one of each node's: torchrun's and
    #: DeepSpeed's lines, and what was named after them), not a rank of the job.
    local: bool = False
    #: The launcher restarted the job's workers after it (torchrun's ``--max-restarts``): a failure
    #: of an earlier attempt, not of the one that ended the job.
    superseded: bool = False


def _sortable(time: str) -> str:
    """Timestamps as written (``2024-05-01 10:00:01,5``, ``...T...``) in one comparable form."""
    return re.sub(r"[T ]", " ", time).replace(",", ".")


def _earliest(findings: list[Finding]) -> Finding:
    """The first of ``findings``: within one source in the order it was written; across sources by
    time, where the first of each has one (a traceback's is mostly a line's before it, lent: when it
    happened at the earliest, which orders files, not the lines of one)."""
    firsts: dict[str, Finding] = {}
    for finding in findings:
        if finding.source not in firsts or finding.order < firsts[finding.source].order:
            firsts[finding.source] = finding
    timed = [f for f in firsts.values() if f.time is not None]
    if timed and len(firsts) > 1:
        return min(timed, key=lambda f: (_sortable(f.time or ""), f.order))
    return min(firsts.values(), key=lambda f: f.order)


def _rank_key(finding: Finding) -> Optional[str]:
    return str(finding.global_rank) if finding.global_rank is not None else finding.who


def culprits(findings: Iterable[Finding]) -> list[Finding]:
    """The candidate root causes: culprit findings, less a launcher's summary of a rank (``exited
    with code 1``) whose own traceback (or exception line) is there as a victim's (``Connection
    closed by peer``): its exit code is that error's, and the rank failed because another one did."""
    found = list(findings)
    lost = {
        _rank_key(f)
        for f in found
        if f.role == VICTIM and f.kind in (Kind.TRACEBACK, Kind.EXCEPTION_LINE) and _rank_key(f) is not None
    }
    return [
        f
        for f in found
        if f.role == CULPRIT and not (f.kind == Kind.LAUNCHER_SUMMARY and _rank_key(f) in lost)
    ]


def decide(findings: Iterable[Finding]) -> Optional[Finding]:
    """The root cause: the earliest culprit of the strongest kind present (see :data:`PRECEDENCE`),
    among those of the attempt that ended the job where the launcher restarted the workers."""
    candidates = culprits(findings)
    current = [f for f in candidates if not f.superseded]
    if any(f.kind is not Kind.LAUNCHER_SUMMARY for f in current):
        candidates = current
    for kinds in PRECEDENCE:
        tier = [f for f in candidates if f.kind in kinds]
        if tier:
            return _earliest(tier)
    return None
