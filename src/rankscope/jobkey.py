"""What says that processes belong to one job: the evidence in their environments.

A job key is made of what every rank of one job carries alike, on every node: torchrun's
``TORCHELASTIC_RUN_ID``, the rendezvous ``MASTER_ADDR:MASTER_PORT``, SLURM's job and step, and the
world size. It never holds a pid or a host, so two nodes' keys can be compared: keys *conflict* when a
part that both carry differs (then the nodes answer for two different jobs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Optional


@dataclass(frozen=True)
class JobKey:
    run_id: Optional[str] = None
    master: Optional[str] = None
    slurm: Optional[str] = None
    world_size: Optional[int] = None

    def text(self) -> str:
        """``run_id=abc master=node1:29500 slurm=1234.0 world=8``; empty with no evidence at all."""
        parts = [
            ("run_id", self.run_id),
            ("master", self.master),
            ("slurm", self.slurm),
            ("world", self.world_size),
        ]
        return " ".join(f"{name}={value}" for name, value in parts if value is not None)

    @property
    def rendezvous(self) -> bool:
        """Whether it names a rendezvous (run id, master or SLURM step), not only a world size."""
        return any(value is not None for value in (self.run_id, self.master, self.slurm))

    def conflicts(self, other: JobKey) -> bool:
        """A part both keys carry differs: they are two different jobs."""
        for item in fields(self):
            mine, theirs = getattr(self, item.name), getattr(other, item.name)
            if mine is not None and theirs is not None and mine != theirs:
                return True
        return False


#: The variables :func:`key_from_env` reads.
KEY_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "SLURM_STEP_ID", "TORCHELASTIC_RUN_ID")


def key_from_env(env: Mapping[str, str], world_size: Optional[int]) -> JobKey:
    """The key a process's environment gives; ``world_size`` is what rankscope.ranks read from it."""
    master = None
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        master = f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    slurm = None
    if env.get("SLURM_JOB_ID"):
        step = env.get("SLURM_STEP_ID")
        slurm = env["SLURM_JOB_ID"] + (f".{step}" if step else "")
    return JobKey(
        run_id=env.get("TORCHELASTIC_RUN_ID") or None,
        master=master,
        slurm=slurm,
        world_size=world_size,
    )


def parse_key(text: str) -> JobKey:
    """The inverse of :meth:`JobKey.text` (a node's answer carries the text)."""
    values: dict[str, str] = {}
    for part in text.split():
        name, _, value = part.partition("=")
        values[name] = value
    world = values.get("world")
    return JobKey(
        run_id=values.get("run_id"),
        master=values.get("master"),
        slurm=values.get("slurm"),
        world_size=int(world) if world and world.isdigit() else None,
    )


def common_key(keys: list[JobKey]) -> JobKey:
    """What a set of processes' keys agree on (a part that differs, or is missing in one, is dropped)."""
    if not keys:
        return JobKey()
    first = keys[0]
    kept = {
        item.name: getattr(first, item.name)
        for item in fields(first)
        if all(getattr(key, item.name) == getattr(first, item.name) for key in keys)
    }
    return JobKey(**kept)
