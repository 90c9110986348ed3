"""The result of `rankscope stacks`: distinct stacks with the ranks in each, and what failed.

This is the JSON document `rankscope stacks --json` prints (schema ``rankscope.stacks/1``,
documented in docs/stacks.md) and what one node sends back in a multi-node run: its size
grows with the number of distinct stacks, not with the number of ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from rankscope.model import SCHEMA_VERSION, Failure, Frame, Member, NodeStatus, RankId
from rankscope.serial import OMIT_NONE, dump_document, load_document

#: Per-process states over several samples.
STUCK = "stuck"
MOVING = "moving"


@dataclass
class StackGroup:
    """Threads with the same role and the same frames, in every process that has one."""

    thread: str
    is_main: bool
    frames: tuple[Frame, ...]
    members: list[Member] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, tuple[Frame, ...]]:
        return (self.thread, self.frames)


@dataclass
class StepInfo:
    """A rank's progress marker (``rankscope.progress``) as read beside its stack."""

    #: The last step given; absent when only labels were.
    step: Optional[int] = field(default=None, metadata=OMIT_NONE)
    labels: dict[str, str] = field(default_factory=dict)
    #: Seconds from its last marker to the collection.
    age: float = field(default=0.0, metadata={"round": 1})

    def text(self) -> str:
        """``step 5 phase=backward`` (labels sorted)."""
        words = [f"step {self.step}"] if self.step is not None else []
        words += [f"{key}={value}" for key, value in sorted(self.labels.items())]
        return " ".join(words)


@dataclass
class ProcessInfo:
    """A process rankscope looked at, whether or not its dump succeeded."""

    pid: int
    rank: RankId
    cmdline: str = ""
    #: stuck / moving over several samples; None with one sample or when the dump failed.
    state: Optional[str] = None
    #: The process was already stopped (SIGSTOP) before rankscope looked.
    was_stopped: bool = False
    #: rankscope found it stopped after the dump and continued it.
    resumed: bool = False
    dumped: bool = True
    #: Its stacks include native frames of its own (--native dumps representatives only, --native-all every rank).
    native: bool = False
    #: Dumps of it tried again because another py-spy / rankscope held it (absent when none).
    retries: Optional[int] = field(default=None, metadata=OMIT_NONE)
    #: Who held it when it was refused (``py-spy (pid 1240) of another rankscope (pid 1236)``).
    held_by: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: How its stacks were taken when not by py-spy: ``signal`` (its in-process handler, docs/inproc.md).
    via: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: The in-process protocol of the job's rankscope, when it differs from the command line's (a
    #: newer rankscope in the job answered; docs/inproc.md).
    handler_version: Optional[int] = field(default=None, metadata=OMIT_NONE)
    #: Its progress marker (rankscope.progress), when it records one.
    progress: Optional[StepInfo] = field(default=None, metadata=OMIT_NONE)
    #: Its pid inside its container's pid namespace, when it runs in one (``pid`` is the host's).
    ns_pid: Optional[int] = field(default=None, metadata=OMIT_NONE)

    @property
    def member(self) -> Member:
        return Member(self.rank.host, self.pid, self.rank.rank)


@dataclass
class JobInfo:
    host: str
    launcher: str
    launcher_pid: Optional[int]
    cmdline: str = ""
    #: The pids of its workers (the processes of ``processes`` that belong to this job).
    pids: list[int] = field(default_factory=list)
    #: This job's own diagnosis, when the report holds several jobs of one node (each is diagnosed
    #: apart; the top-level ``diagnosis`` then joins theirs).
    diagnosis: Optional[Diagnosis] = field(default=None, metadata=OMIT_NONE)
    #: What its workers' environments agree on (rankscope.jobkey: ``run_id=... master=... world=4``);
    #: a multi-node merge compares the nodes' keys and flags a mix.
    key: Optional[str] = field(default=None, metadata=OMIT_NONE)

    def describe(self) -> str:
        if self.launcher_pid is not None:
            return f"{self.launcher} pid {self.launcher_pid}"
        return (
            f"{self.launcher} (pids {', '.join(str(p) for p in self.pids)})" if self.pids else self.launcher
        )


@dataclass
class StrayInfo:
    """A process with a rank in its environment that fits no job of its node: listed, not dumped."""

    host: str
    pid: int
    rank: Optional[int]
    world_size: Optional[int]
    uid: Optional[int]
    cmdline: str = ""
    #: Its pid inside its container's pid namespace, when it runs in one (``pid`` is the host's).
    ns_pid: Optional[int] = field(default=None, metadata=OMIT_NONE)


@dataclass
class Finding:
    """A set of ranks at one place, and the sentence that says so."""

    #: "waiting" (in a collective), "elsewhere" (not), "together" (everyone the same).
    kind: str
    #: The members' ranks, folded (``0-1,3``).
    ranks: str
    members: list[Member]
    #: e.g. "all_reduce (torch.distributed)"; None when not in a collective.
    collective: Optional[str]
    #: The user's frame that called the collective (or the innermost user frame).
    called_from: Optional[Frame]
    #: The innermost frame (what py-spy prints first).
    innermost: Optional[Frame]
    text: str
    #: The call the members wait for the GPU in (``cudaDeviceSynchronize``), when they do.
    gpu_wait: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: When the members are at different steps (rankscope.progress): each step and who is at it
    #: (``{"1": "rank 0", "2": "ranks 1-2"}``); absent when they agree or record none.
    steps: Optional[dict[str, str]] = field(default=None, metadata=OMIT_NONE)


@dataclass
class GpuStatus:
    """One GPU of a node as NVML or nvidia-smi saw it, right after the dumps."""

    host: str
    index: int
    name: str = ""
    #: Percent of the last sample period in which a kernel ran (nvidia-smi's utilization.gpu).
    utilization: Optional[int] = None
    memory_used_mib: Optional[int] = None
    memory_total_mib: Optional[int] = None
    #: "NVML" or "nvidia-smi".
    source: str = "nvidia-smi"


@dataclass
class Diagnosis:
    headline: str
    findings: list[Finding] = field(default_factory=list)
    divergent: list[Member] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The ranks of ``divergent``, sorted: what a script checks first.
    divergent_ranks: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.divergent_ranks = sorted({m.rank for m in self.divergent if m.rank is not None})


@dataclass
class StacksReport:
    """The ``rankscope.stacks`` document: one node's (or, merged, every node's) stacks."""

    SCHEMA: ClassVar[str] = f"rankscope.stacks/{SCHEMA_VERSION}"

    groups: list[StackGroup] = field(default_factory=list)
    processes: list[ProcessInfo] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    jobs: list[JobInfo] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    samples: int = 1
    interval: float = 0.0
    native: bool = False
    seconds: float = field(default=0.0, metadata={"round": 3})
    #: Filled in by the analysis (rankscope.stacks.analyse.diagnose) before the report is written.
    diagnosis: Optional[Diagnosis] = field(default=None, metadata=OMIT_NONE)
    #: Multi-node runs: how every node answered (failed ones are also in ``failures``).
    nodes: Optional[list[NodeStatus]] = field(default=None, metadata=OMIT_NONE)
    #: The GPUs of nodes where a rank waits for its GPU (NVML or nvidia-smi); None when not looked at.
    gpus: Optional[list[GpuStatus]] = field(default=None, metadata=OMIT_NONE)
    #: Processes with a rank that fit no job (listed apart, never dumped with a job).
    strays: Optional[list[StrayInfo]] = field(default=None, metadata=OMIT_NONE)
    #: Set when the nodes of a merged report answered for different jobs: each node's job key.
    mixed_jobs: Optional[dict[str, list[str]]] = field(default=None, metadata=OMIT_NONE)
    #: ``--local --json`` (one node of a multi-node run): its ranks' flight-recorder entries, compact
    #: (rankscope.stacks.fr_live.LiveRecorders as JSON), for the head to align every node's ranks.
    fr_records: Optional[Any] = field(default=None, metadata=OMIT_NONE)

    def main_groups(self) -> list[StackGroup]:
        return [g for g in self.groups if g.is_main]

    def several_jobs(self) -> bool:
        """Several jobs of one node, each to be diagnosed and shown apart (a multi-node job has one
        launcher per node: those are one job)."""
        return len(self.hosts) <= 1 and sum(1 for j in self.jobs if j.pids) > 1

    def other_groups(self) -> list[StackGroup]:
        return [g for g in self.groups if not g.is_main]


def report_document(report: StacksReport) -> dict[str, Any]:
    """The JSON `rankscope stacks --json` prints (and writes to --out DIR/stacks.json)."""
    return dump_document(report)


def load_report(data: Any) -> StacksReport:
    """A :func:`report_document` read back (a node's answer, or a saved stacks.json); ValueError if it is not one."""
    return load_document(StacksReport, data)
