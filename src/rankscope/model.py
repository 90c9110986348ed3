"""The shared vocabulary of rankscope: who a process is, what its stacks were, what failed.

Everything here is plain data with one JSON form (rankscope.serial). Modules imported inside a training
process use this file, so it stays compatible with Python 3.9.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple, Optional

from rankscope.serial import OMIT_NONE

#: Bumped whenever a JSON field changes meaning or disappears (adding fields does not bump it).
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RankId:
    """Where a process sits in a distributed job.

    ``rank`` is the global rank when the launcher says so; it is ``None`` for a Python
    process that is not part of a job (found with ``--all-python``).
    """

    host: str
    rank: Optional[int] = None
    local_rank: Optional[int] = None
    world_size: Optional[int] = None
    node_rank: Optional[int] = None
    local_world_size: Optional[int] = None
    launcher: str = "unknown"

    @property
    def label(self) -> str:
        """``host:rank`` as printed in logs and reports (``host`` alone without a rank)."""
        return rank_label(self.host, self.rank)


def rank_label(host: str, rank: Optional[int]) -> str:
    """The one spelling of a rank's label: ``host:rank``, or ``host`` for a process without a rank."""
    return host if rank is None else f"{host}:{rank}"


def parse_label(label: str) -> tuple[str, Optional[int]]:
    """``"node1:3"`` -> ``("node1", 3)``; ``"node1"`` -> ``("node1", None)`` (the inverse of rank_label)."""
    host, sep, rank = label.rpartition(":")
    if sep and rank.isascii() and rank.isdigit():
        return host, int(rank)
    return label, None


@dataclass(frozen=True)
class Member:
    """One process in a group of equal things (a stack, an error, an output): where it runs, and its rank."""

    host: str
    pid: int
    rank: Optional[int]

    @property
    def label(self) -> str:
        return rank_label(self.host, self.rank)


class Frame(NamedTuple):
    """One frame of a stack.

    A tuple, not a dataclass: merging 100k ranks hashes millions of frames and tuple
    hashing runs in C. ``library`` is set for native (C/C++) frames and names the shared
    object; Python frames have ``library=None``.
    """

    function: str
    filename: str
    line: int
    library: Optional[str] = None

    @property
    def is_native(self) -> bool:
        return self.library is not None

    @property
    def short_filename(self) -> str:
        """The path a person recognises: from the package root for installed code."""
        return short_path(self.filename)

    @property
    def location(self) -> str:
        if self.is_native:
            return self.filename.rsplit("/", 1)[-1]
        return f"{self.short_filename}:{self.line}"


_PACKAGE_ROOTS = ("/site-packages/", "/dist-packages/")


def short_path(filename: str) -> str:
    """``.../site-packages/torch/distributed/x.py`` -> ``torch/distributed/x.py``; stdlib -> basename."""
    for root in _PACKAGE_ROOTS:
        cut = filename.rfind(root)
        if cut >= 0:
            return filename[cut + len(root) :]
    return filename.rsplit("/", 1)[-1]


@dataclass
class ThreadStack:
    """One thread's stack, outermost frame first (the order a call tree is drawn in)."""

    thread_id: int
    name: str
    frames: tuple[Frame, ...]
    is_main: bool = False
    active: bool = False
    owns_gil: bool = False
    #: Per-frame local variables (aligned with ``frames``) when collected with ``--locals``.
    locals: Optional[tuple[Optional[dict[str, str]], ...]] = field(default=None, metadata=OMIT_NONE)


@dataclass
class ProcessSnapshot:
    """Every thread of one process at one moment."""

    pid: int
    rank: RankId
    threads: list[ThreadStack]
    taken_at: float = field(default_factory=time.time)
    cmdline: str = ""

    @property
    def main_thread(self) -> Optional[ThreadStack]:
        for thread in self.threads:
            if thread.is_main:
                return thread
        return self.threads[0] if self.threads else None


class Words(str, Enum):
    """An enum whose members are the words written in reports and JSON (``Stage.NO_JOB == "no job found"``)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Stage(Words):
    """How far rankscope got with a target before it failed: one ladder for processes and nodes.

    A process: discover -> attach -> dump -> parse. A node (the manual "date, then pgrep, then
    py-spy" ladder): unreachable -> auth refused -> transport error / timeout -> no rankscope
    there -> no job found -> dump failed / bad answer / command failed. ``ok`` is a node that answered;
    ``interrupted`` one that had not when rankscope was stopped (Ctrl-C, SIGTERM).
    """

    DISCOVER = "discover"
    ATTACH = "attach"
    DUMP = "dump"
    PARSE = "parse"
    OK = "ok"
    UNREACHABLE = "unreachable"
    AUTH_REFUSED = "auth refused"
    TIMEOUT = "timeout"
    TRANSPORT_ERROR = "transport error"
    COMMAND_FAILED = "command failed"
    NO_RANKSCOPE = "no rankscope there"
    NO_JOB = "no job found"
    DUMP_FAILED = "dump failed"
    BAD_ANSWER = "bad answer"
    #: rankscope was told to stop (SIGINT, SIGTERM) before this node answered.
    INTERRUPTED = "interrupted"


class FailureKind(Words):
    """Why a target failed, whatever the stage: what the exit code and the fix depend on."""

    GONE = "gone"
    PERMISSION = "permission"
    #: Another tracer (strace, gdb, py-spy, another rankscope) holds the process: one at a time.
    ALREADY_TRACED = "already-traced"
    NOT_PYTHON = "not-python"
    ZOMBIE = "zombie"
    TIMED_OUT = "timed-out"
    MISSING_TOOL = "missing-tool"
    BAD_OUTPUT = "bad-output"
    NOTHING_THERE = "nothing-there"
    #: Stacks without ptrace were asked for, but the process has no in-process handler (RANKSCOPE_INPROC=1).
    NO_HANDLER = "no-handler"
    OTHER = "other"


@dataclass(frozen=True)
class Failure:
    """Something rankscope could not do, kept as data so the rest of the report still prints.

    ``stage`` is where it stopped and ``kind`` why; ``hint`` is the next thing the user can do.
    """

    target: str
    stage: Stage
    reason: str
    hint: str = ""
    rank: Optional[RankId] = None
    kind: FailureKind = FailureKind.OTHER


@dataclass
class NodeStatus:
    """How one node of a multi-node run answered: ``ok``, or the stage it reached and why."""

    node: str
    stage: Stage
    #: The remote command's exit status; None when it never reported one (transport failure, timeout).
    returncode: Optional[int]
    reason: str = ""
    elapsed: float = field(default=0.0, metadata={"round": 3})
