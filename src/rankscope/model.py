"""The shared vocabulary of rankscope: who a process is, what its stacks were, what failed.

Everything here is plain data with one JSON form. Modules imported inside a training
process use this file, so it stays compatible with Python 3.9.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

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
        return self.host if self.rank is None else f"{self.host}:{self.rank}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "node_rank": self.node_rank,
            "local_world_size": self.local_world_size,
            "launcher": self.launcher,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankId:
        return cls(
            host=str(data.get("host", "")),
            rank=data.get("rank"),
            local_rank=data.get("local_rank"),
            world_size=data.get("world_size"),
            node_rank=data.get("node_rank"),
            local_world_size=data.get("local_world_size"),
            launcher=str(data.get("launcher", "unknown")),
        )


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

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"function": self.function, "filename": self.filename, "line": self.line}
        if self.library is not None:
            data["library"] = self.library
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Frame:
        return cls(str(data["function"]), str(data["filename"]), int(data["line"]), data.get("library"))


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
    locals: Optional[tuple[Optional[dict[str, str]], ...]] = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "thread_id": self.thread_id,
            "name": self.name,
            "is_main": self.is_main,
            "active": self.active,
            "owns_gil": self.owns_gil,
            "frames": [f.to_dict() for f in self.frames],
        }
        if self.locals is not None:
            data["locals"] = list(self.locals)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ThreadStack:
        local_vars = data.get("locals")
        return cls(
            thread_id=int(data["thread_id"]),
            name=str(data.get("name", "")),
            frames=tuple(Frame.from_dict(f) for f in data.get("frames", [])),
            is_main=bool(data.get("is_main", False)),
            active=bool(data.get("active", False)),
            owns_gil=bool(data.get("owns_gil", False)),
            locals=tuple(local_vars) if local_vars is not None else None,
        )


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "rank": self.rank.to_dict(),
            "taken_at": self.taken_at,
            "cmdline": self.cmdline,
            "threads": [t.to_dict() for t in self.threads],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessSnapshot:
        return cls(
            pid=int(data["pid"]),
            rank=RankId.from_dict(data.get("rank", {})),
            threads=[ThreadStack.from_dict(t) for t in data.get("threads", [])],
            taken_at=float(data.get("taken_at", 0.0)),
            cmdline=str(data.get("cmdline", "")),
        )


@dataclass(frozen=True)
class Failure:
    """Something rankscope could not do, kept as data so the rest of the report still prints.

    ``stage`` is where it stopped: ``discover``, ``attach``, ``dump``, ``parse``, ``connect`` ...
    ``hint`` is the next thing the user can do about it.
    """

    target: str
    stage: str
    reason: str
    hint: str = ""
    rank: Optional[RankId] = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "stage": self.stage,
            "reason": self.reason,
            "hint": self.hint,
            "rank": self.rank.to_dict() if self.rank else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Failure:
        rank = data.get("rank")
        return cls(
            target=str(data["target"]),
            stage=str(data["stage"]),
            reason=str(data["reason"]),
            hint=str(data.get("hint", "")),
            rank=RankId.from_dict(rank) if rank else None,
        )
