"""What `rankscope launch` is asked to start, and what it answers: one recipe per launcher."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.model import Words
from rankscope.serial import OMIT_NONE


class Prefix(Words):
    """How each output line gets its ``[host:rank]``."""

    #: The launcher's own flags: torchrun --tee/--role, srun --label, mpirun --tag-output (pdsh and
    #: deepspeed name the host on every line themselves).
    NATIVE = "native"
    #: ``rankscope prefix --`` in front of the worker (needs rankscope on every node).
    RANKSCOPE = "rankscope"
    NONE = "none"


class Launcher(Words):
    TORCHRUN = "torchrun"
    SBATCH = "sbatch"
    SRUN = "srun"
    PDSH = "pdsh"
    MPIRUN = "mpirun"
    DEEPSPEED = "deepspeed"


@dataclass(frozen=True)
class LaunchPlan:
    """One script on ``nodes`` x ``gpus`` processes; the builders read nothing else."""

    script: str
    args: tuple[str, ...] = ()
    nodes: int = 1
    #: Processes per node (one per GPU).
    gpus: int = 1
    #: Node names in node-rank order; empty: placeholders ``node1``.. (the recipes say so).
    hosts: tuple[str, ...] = ()
    #: Rendezvous host; the first node when not given.
    master_addr: Optional[str] = None
    port: int = 29500
    python: str = "python3"
    #: How torchrun is started on the nodes (a venv's bin/torchrun, or python3 -m torch.distributed.run).
    torchrun: tuple[str, ...] = ("torchrun",)
    #: Directory the job runs in on every node (pdsh starts in the login directory).
    workdir: Optional[str] = None
    prefix: Prefix = Prefix.NATIVE
    #: Ask SLURM for the GPUs (``--gpus-per-node``); off for CPU-only partitions.
    slurm_gpus: bool = True
    job_name: str = "rankscope-job"
    #: sbatch scripts run their step under `rankscope watch` (docs/watch.md), with the time-limit signal.
    watch: bool = False

    @property
    def node_names(self) -> tuple[str, ...]:
        return self.hosts or tuple(f"node{i}" for i in range(1, self.nodes + 1))

    @property
    def rendezvous_host(self) -> str:
        return self.master_addr or self.node_names[0]

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus


@dataclass(frozen=True)
class Command:
    #: Where to run it: ``node1 (node rank 0)``, ``the login node``, ``inside the allocation``.
    where: str
    command: str


@dataclass(frozen=True)
class LaunchFile:
    """A file the command reads (hostfile, sbatch script): written next to it under this name."""

    name: str
    text: str


@dataclass(frozen=True)
class Recipe:
    launcher: Launcher
    commands: tuple[Command, ...]
    files: tuple[LaunchFile, ...] = ()
    notes: tuple[str, ...] = ()
    #: How lines are labelled in this recipe's output.
    prefix_note: Optional[str] = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class LaunchReport:
    SCHEMA: ClassVar[str] = "rankscope.launch/1"

    plan: LaunchPlan
    recipes: tuple[Recipe, ...]
