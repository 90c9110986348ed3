"""gpu-test's data: what each rank reports, and rank 0's pure summary of them (wording next to the data)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.folding import RankSet, fold_hosts
from rankscope.model import Words, rank_label
from rankscope.ranks import launcher_of
from rankscope.serial import OMIT_NONE


class Step(Words):
    """How far a rank got: the step it failed in, or OK."""

    CONFIG = "config"  # a set-up mistake found before the backend started
    TORCH = "torch"  # PyTorch missing or the device unusable
    STORE = "store"  # could not reach the rendezvous store at MASTER_ADDR:MASTER_PORT
    ARRIVE = "arrive"  # waited for the other ranks to arrive at the store
    INIT = "init"  # init_process_group
    ALLOCATE = "allocate"
    ALL_REDUCE = "all_reduce"
    CHECK = "check"  # all_reduce returned, with a wrong value
    BARRIER = "barrier"
    OK = "ok"


@dataclass
class RankResult:
    host: str
    rank: int
    step: Step
    local_rank: Optional[int] = None
    world_size: Optional[int] = None
    backend: str = ""
    device: str = ""
    device_name: str = field(default="", metadata=OMIT_NONE)
    capability: Optional[str] = field(default=None, metadata=OMIT_NONE)
    torch: str = ""
    cuda: Optional[str] = field(default=None, metadata=OMIT_NONE)
    nccl: Optional[str] = field(default=None, metadata=OMIT_NONE)
    cpus: str = ""
    numa: Optional[str] = field(default=None, metadata=OMIT_NONE)
    reason: str = ""
    fix: str = ""
    elapsed: float = field(default=0.0, metadata={"round": 3})

    @property
    def ok(self) -> bool:
        return self.step == Step.OK

    @property
    def label(self) -> str:
        return rank_label(self.host, self.rank)

    def line(self) -> str:
        """`[host:rank] OK ...` or `[host:rank] FAILED at STEP: reason — fix`."""
        if not self.ok:
            tail = f" — {self.fix}" if self.fix else ""
            return f"[{self.label}] FAILED at {self.step}: {self.reason}{tail}"
        device = self.device + (f" {self.device_name}" if self.device_name else "")
        if self.capability:
            device += f" (sm {self.capability})"
        versions = f"torch {self.torch}"
        if self.cuda:
            versions += f", CUDA {self.cuda}"
        if self.nccl:
            versions += f", NCCL {self.nccl}"
        affinity = f"cpus {self.cpus}" + (f", numa {self.numa}" if self.numa is not None else "")
        return f"[{self.label}] OK {self.backend} {device}; {versions}; {affinity}; {self.elapsed:.2f} s"


@dataclass
class Summary:
    SCHEMA: ClassVar[str] = "rankscope.gputest/1"

    world_size: int
    backend: str
    ok: list[int] = field(default_factory=list)
    failed: list[RankResult] = field(default_factory=list)
    #: ranks that never reached the store at all
    never_joined: list[int] = field(default_factory=list)
    #: ranks that joined but reported no result before the deadline (hung in the backend, or died)
    no_result: list[int] = field(default_factory=list)
    #: ranks that only waited for the missing ones to arrive (victims, not culprits)
    waited: list[int] = field(default_factory=list)
    #: rank (as text) -> host, for the never_joined and no_result ranks whose host is known
    #: (from their arrival in the store, else from the launcher's task layout)
    hosts: dict[str, str] = field(default_factory=dict)
    results: list[RankResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not (self.failed or self.never_joined or self.no_result or self.waited)


def summarise(
    world_size: int,
    backend: str,
    results: Sequence[RankResult],
    joined: Sequence[int],
    hosts: Optional[Mapping[int, str]] = None,
) -> Summary:
    """Rank 0's view: ``results`` the ranks posted, ``joined`` the ranks the store saw arrive,
    ``hosts`` where ranks run as far as rank 0 knows (kept for the ranks without a result)."""
    by_rank = {r.rank: r for r in results}
    summary = Summary(world_size=world_size, backend=backend, results=sorted(results, key=lambda r: r.rank))
    for rank in range(world_size):
        result = by_rank.get(rank)
        if result is None:
            (summary.no_result if rank in joined else summary.never_joined).append(rank)
        elif result.ok:
            summary.ok.append(rank)
        elif result.step == Step.ARRIVE:
            summary.waited.append(rank)
        else:
            summary.failed.append(result)
    hosts = hosts or {}
    summary.hosts = {str(r): hosts[r] for r in (*summary.never_joined, *summary.no_result) if r in hosts}
    return summary


def _on(summary: Summary, ranks: Sequence[int]) -> str:
    """`` (on n[5,9])``: the hosts of ``ranks`` where known, saying so when some are not."""
    known = [summary.hosts[str(r)] for r in ranks if str(r) in summary.hosts]
    if not known:
        return ""
    return f" (on {fold_hosts(known)}{'' if len(known) == len(ranks) else ', and hosts not known'})"


def _tasks_per_node(text: str) -> list[int]:
    """SLURM's ``2(x3),1`` -> ``[2, 2, 2, 1]``; ValueError when it reads otherwise."""
    counts: list[int] = []
    for part in text.split(","):
        count, _, repeat = part.strip().partition("(x")
        counts += [int(count)] * (int(repeat.rstrip(")")) if repeat else 1)
    return counts


def slurm_task_hosts(env: Mapping[str, str], expand: Callable[[str], list[str]]) -> dict[int, str]:
    """Rank -> node of an ``srun`` step with the block distribution (SLURM's default), from the
    step's node list and tasks per node, as every task of the step sees them; empty when the
    ranks are not SLURM's task ids (torchrun under srun), the distribution is another, or the
    variables do not read. ``expand`` turns ``n[1-4]`` into names."""
    if launcher_of(env) != "srun":
        return {}
    distribution = env.get("SLURM_DISTRIBUTION", "block")
    if not distribution.startswith("block"):
        return {}
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "")
    tasks = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "")
    try:
        nodes, counts = expand(nodelist), _tasks_per_node(tasks)
    except Exception:  # a node list or count that does not read: no guess
        return {}
    if not nodes or len(nodes) != len(counts):
        return {}
    hosts = [node for node, count in zip(nodes, counts) for _ in range(count)]
    return dict(enumerate(hosts))


def summary_lines(summary: Summary, timeout: float) -> list[str]:
    """What rank 0 prints after the per-rank lines."""
    n = summary.world_size
    if summary.passed:
        return [f"gpu-test: all {n} ranks OK ({summary.backend}: init, all_reduce checked, barrier)"]
    lines = [f"gpu-test: FAILED — {len(summary.ok)} of {n} ranks OK ({summary.backend})"]
    for result in summary.failed:
        lines.append(f"  rank {result.rank} ({result.label}) failed at {result.step}: {result.reason}")
        if result.fix:
            lines.append(f"    fix: {result.fix}")
    if summary.never_joined:
        lines.append(
            f"  {RankSet.of(summary.never_joined).phrase()}{_on(summary, summary.never_joined)} never joined"
            f" within {timeout:g} s: they did not start,"
            " or cannot reach MASTER_ADDR:MASTER_PORT (check the launcher's log on their nodes,"
            " and `rankscope net check`)"
        )
        if summary.waited:
            lines.append(f"  {RankSet.of(summary.waited).phrase()} waited for them at the store")
    if summary.no_result:
        lines.append(
            f"  {RankSet.of(summary.no_result).phrase()}{_on(summary, summary.no_result)} joined but gave no result"
            f" within {timeout:g} s: they hang in"
            " the backend or died (run `rankscope stacks` on their nodes)"
        )
    return lines
