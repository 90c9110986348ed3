"""Everything one `rankscope why` pass gathered, as data (what collect.py returns and analyse reads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from rankscope.evidence import Finding
from rankscope.model import Failure, NodeStatus
from rankscope.why.report import CoreInfo, DeadRank, GpuFacts, KernelEvent, RankFile, Signal

if TYPE_CHECKING:
    from rankscope.fr.report import FrReport
    from rankscope.stacks.report import StacksReport
    from rankscope.why.fatal import FatalDump
    from rankscope.why.loader import LoaderWorker


@dataclass
class Gathered:
    """The signals of one node (or of saved inputs); every field may be empty."""

    hosts: list[str] = field(default_factory=list)
    stacks: Optional[StacksReport] = None
    fr: Optional[FrReport] = None
    #: Findings of the job's output (rankscope.logs' `logs errors`), and their user frames:
    #: (source, line) -> ``function (file:line)``.
    log_findings: list[Finding] = field(default_factory=list)
    log_places: dict[tuple[str, int], str] = field(default_factory=dict)
    #: torch's global ranks of a traceback's group (every copy carried its marker), by its (source, line):
    #: the ranks that raised that one error, where more than one did.
    log_group_ranks: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    #: What NCCL said after a finding's error (a DistBackendError's error name and ``Last error:``),
    #: as evidence lines: (source, line) -> ``NCCL's last error: ...``.
    log_reasons: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    #: faulthandler's dumps in the job's output (a rank that died of a fatal signal).
    fatal_dumps: list[FatalDump] = field(default_factory=list)
    #: The DataLoader workers of ranks that wait for their batch, and where each is (rankscope.why.loader).
    loader_workers: list[LoaderWorker] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    kernel: list[KernelEvent] = field(default_factory=list)
    dead: list[DeadRank] = field(default_factory=list)
    rank_files: list[RankFile] = field(default_factory=list)
    cores: list[CoreInfo] = field(default_factory=list)
    gpus: list[GpuFacts] = field(default_factory=list)
    #: rank -> where its trace ring (rankscope trace) last saw it: what a rank that ended leaves.
    traced: dict[int, str] = field(default_factory=dict)
    #: pid -> global rank, from every source that says it (discovery, runtime file names, cores).
    pid_rank: dict[int, int] = field(default_factory=dict)
    signals: list[Signal] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Raw text kept for --out: name -> bytes (kernel messages, the job's environment without secrets ...).
    raw: dict[str, bytes] = field(default_factory=dict)
    #: `stacks`' own result (rankscope.stacks.local.LocalResult), for --out to keep its raw dumps.
    stacks_result: Optional[Any] = None
    #: The job's environment (its launcher's, else a rank's), for --out (secrets removed there).
    environ: dict[str, str] = field(default_factory=dict)
    #: A multi-node run: the nodes' own findings (job output, kernel, ended ranks, files) as each node
    #: weighed them (pids mean something only there); the head derives only stacks' and recorders'.
    merged: bool = False
    node_findings: list[Finding] = field(default_factory=list)
    nodes: Optional[list[NodeStatus]] = None

    def signal(self, name: str, state: str, detail: str = "") -> None:
        self.signals.append(Signal(name, state, detail))
