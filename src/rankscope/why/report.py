"""The `rankscope why` document (schema ``rankscope.why/1``, docs/why.md): the verdict first, then
the weaker hypotheses, every rank's state merged by equal state, what each signal gave, and the
signals themselves. One dataclass tree, so other renderers read the same object the text does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from rankscope.evidence import Finding
from rankscope.fr.report import FrReport
from rankscope.model import SCHEMA_VERSION, Failure, NodeStatus
from rankscope.serial import OMIT_NONE, dump_document, load_document
from rankscope.stacks.report import StacksReport

#: How the run ended, what a script tells apart (docs/exit-codes.md).
CAUSE = "cause"  # a cause is named
NO_PROBLEM = "no problem"  # every signal read, nothing wrong seen
PARTIAL = "partial"  # the evidence is too partial to judge
#: The note (and the headline) of a report whose every error is a victim's: no rank to blame.
VICTIMS_ONLY = "every error seen is a consequence of another rank's failure"
NOTHING = "nothing"  # no job and no input: nothing to judge

#: States of a signal line.
READ = "read"
ABSENT = "absent"
REFUSED = "refused"
FAILED = "failed"
SKIPPED = "skipped"


@dataclass
class Evidence:
    """One line that supports a hypothesis, and where it comes from."""

    source: str
    text: str


@dataclass
class Hypothesis:
    """A cause the evidence allows: its ranks, where in the user's code, and the lines that show it."""

    #: A stable id: ``python_exception``, ``sigkill``, ``oom_kill``, ``collective_desync``,
    #: ``elsewhere``, ``gpu_wait``, ``native_crash``, ``gpu_xid``, ``all_waiting``, ...
    cause: str
    #: The sentence a person reads first.
    text: str
    #: The culprit global ranks (empty: no rank to blame, e.g. every rank waits in one collective).
    ranks: list[int] = field(default_factory=list)
    #: ``function (file:line)`` of the user's code, when known.
    location: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: The kind of evidence that weighs it (rankscope.evidence.Kind's value).
    kind: str = ""
    evidence: list[Evidence] = field(default_factory=list)
    next_step: str = ""


@dataclass
class RankState:
    """Ranks in the same state (as `stacks` merges equal stacks)."""

    ranks: str
    rank_list: list[int]
    state: str
    hosts: list[str] = field(default_factory=list)


@dataclass
class Signal:
    """What one signal gave: read, absent, refused, failed or skipped, and in words why."""

    name: str
    state: str
    detail: str = ""


@dataclass
class KernelEvent:
    """A kernel message about a process or a GPU: an OOM kill, a segfault, an NVIDIA Xid."""

    #: ``oom_kill``, ``segfault``, ``xid``.
    kind: str
    text: str
    pid: Optional[int] = field(default=None, metadata=OMIT_NONE)
    time: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: The Xid number, for ``xid``.
    xid: Optional[int] = field(default=None, metadata=OMIT_NONE)
    line: int = 0


@dataclass
class DeadRank:
    """A rank process that ended before the job did: its exit status, where its launcher has not yet reaped it."""

    pid: int
    rank: Optional[int]
    #: The signal that ended it, or None when it exited.
    signal: Optional[int] = field(default=None, metadata=OMIT_NONE)
    exit_code: Optional[int] = field(default=None, metadata=OMIT_NONE)
    host: str = ""


@dataclass
class RankFile:
    """A rank's own dump left in its runtime directory: faulthandler's ``.crash`` (a fatal signal) or
    ``.term`` (SIGTERM), or a torchelastic error file."""

    kind: str
    path: str
    rank: Optional[int]
    pid: Optional[int] = field(default=None, metadata=OMIT_NONE)
    #: The innermost user frame, ``function (file:line)``.
    location: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: The exception or the signal, in words.
    what: str = ""
    time: Optional[str] = field(default=None, metadata=OMIT_NONE)


@dataclass
class CoreInfo:
    path: str
    pid: Optional[int] = field(default=None, metadata=OMIT_NONE)
    rank: Optional[int] = field(default=None, metadata=OMIT_NONE)
    signal: Optional[int] = field(default=None, metadata=OMIT_NONE)
    program: str = ""


@dataclass
class GpuFacts:
    """A GPU of a node, as NVML or nvidia-smi said: what a rank blocked on it needs next to it."""

    host: str
    index: int
    name: str = ""
    utilization: Optional[int] = field(default=None, metadata=OMIT_NONE)
    memory_used_mib: Optional[int] = field(default=None, metadata=OMIT_NONE)
    ecc_uncorrected: Optional[int] = field(default=None, metadata=OMIT_NONE)
    pids: list[int] = field(default_factory=list)
    source: str = ""


@dataclass
class WhyReport:
    """The ``rankscope.why`` document."""

    SCHEMA: ClassVar[str] = f"rankscope.why/{SCHEMA_VERSION}"

    outcome: str
    verdict: Optional[Hypothesis] = None
    hypotheses: list[Hypothesis] = field(default_factory=list)
    ranks: list[RankState] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    seconds: float = field(default=0.0, metadata={"round": 3})
    notes: list[str] = field(default_factory=list)
    #: Every finding weighed (rankscope.evidence), the verdict's among them.
    findings: list[Finding] = field(default_factory=list)
    #: The signals, as each room's own report (the fields of ``rankscope.stacks`` and ``rankscope.fr``).
    stacks: Optional[StacksReport] = field(default=None, metadata=OMIT_NONE)
    fr: Optional[FrReport] = field(default=None, metadata=OMIT_NONE)
    kernel: list[KernelEvent] = field(default_factory=list)
    dead: list[DeadRank] = field(default_factory=list)
    rank_files: list[RankFile] = field(default_factory=list)
    cores: list[CoreInfo] = field(default_factory=list)
    gpus: list[GpuFacts] = field(default_factory=list)
    #: The job's output files read (found without asking, or --log).
    logs: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    #: Multi-node runs: how each node answered.
    nodes: Optional[list[NodeStatus]] = field(default=None, metadata=OMIT_NONE)


def report_document(report: WhyReport) -> dict[str, Any]:
    return dump_document(report)


def load_report(data: Any) -> WhyReport:
    return load_document(WhyReport, data)


def exit_code(report: WhyReport) -> int:
    """The exit code of a report: 15 a cause named, 0 nothing wrong seen, 3 nothing to judge, 4 partial."""
    from rankscope.errors import ExitCode

    if report.outcome == CAUSE:
        return int(ExitCode.CAUSE_NAMED)
    if report.outcome == NO_PROBLEM:
        return int(ExitCode.OK)
    if report.outcome == NOTHING:
        return int(ExitCode.NOTHING_FOUND)
    return int(ExitCode.PARTIAL)
