"""The result of `rankscope stacks`: distinct stacks with the ranks in each, and what failed.

This is the JSON document `rankscope stacks --json` prints (schema ``rankscope.stacks/1``,
documented in docs/stacks.md) and what one node sends back in a multi-node run: its size
grows with the number of distinct stacks, not with the number of ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from rankscope.model import SCHEMA_VERSION, Failure, Frame, RankId

SCHEMA = f"rankscope.stacks/{SCHEMA_VERSION}"

#: Per-process states over several samples.
STUCK = "stuck"
MOVING = "moving"


@dataclass(frozen=True)
class Member:
    """One process in a stack group."""

    host: str
    pid: int
    rank: Optional[int]

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "rank": self.rank}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Member:
        return cls(host=str(data["host"]), pid=int(data["pid"]), rank=data.get("rank"))


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "thread": self.thread,
            "is_main": self.is_main,
            "frames": [f.to_dict() for f in self.frames],
            "members": [m.to_dict() for m in self.members],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StackGroup:
        return cls(
            thread=str(data["thread"]),
            is_main=bool(data.get("is_main", False)),
            frames=tuple(Frame.from_dict(f) for f in data.get("frames", [])),
            members=[Member.from_dict(m) for m in data.get("members", [])],
        )


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

    @property
    def member(self) -> Member:
        return Member(self.rank.host, self.pid, self.rank.rank)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "rank": self.rank.to_dict(),
            "cmdline": self.cmdline,
            "state": self.state,
            "was_stopped": self.was_stopped,
            "resumed": self.resumed,
            "dumped": self.dumped,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessInfo:
        return cls(
            pid=int(data["pid"]),
            rank=RankId.from_dict(data.get("rank", {})),
            cmdline=str(data.get("cmdline", "")),
            state=data.get("state"),
            was_stopped=bool(data.get("was_stopped", False)),
            resumed=bool(data.get("resumed", False)),
            dumped=bool(data.get("dumped", True)),
        )


@dataclass
class JobInfo:
    host: str
    launcher: str
    launcher_pid: Optional[int]
    cmdline: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "launcher": self.launcher,
            "launcher_pid": self.launcher_pid,
            "cmdline": self.cmdline,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobInfo:
        return cls(
            host=str(data.get("host", "")),
            launcher=str(data.get("launcher", "unknown")),
            launcher_pid=data.get("launcher_pid"),
            cmdline=str(data.get("cmdline", "")),
        )


@dataclass
class StacksReport:
    groups: list[StackGroup] = field(default_factory=list)
    processes: list[ProcessInfo] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    jobs: list[JobInfo] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    samples: int = 1
    interval: float = 0.0
    native: bool = False
    seconds: float = 0.0

    def main_groups(self) -> list[StackGroup]:
        return [g for g in self.groups if g.is_main]

    def other_groups(self) -> list[StackGroup]:
        return [g for g in self.groups if not g.is_main]

    def to_dict(self, diagnosis: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA,
            "hosts": self.hosts,
            "jobs": [j.to_dict() for j in self.jobs],
            "samples": self.samples,
            "interval": self.interval,
            "native": self.native,
            "seconds": round(self.seconds, 3),
            "processes": [p.to_dict() for p in self.processes],
            "groups": [g.to_dict() for g in self.groups],
            "failures": [f.to_dict() for f in self.failures],
        }
        if diagnosis is not None:
            data["diagnosis"] = diagnosis
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StacksReport:
        schema = str(data.get("schema", ""))
        if not schema.startswith("rankscope.stacks/"):
            raise ValueError(f"not a rankscope stacks document (schema {schema!r})")
        return cls(
            groups=[StackGroup.from_dict(g) for g in data.get("groups", [])],
            processes=[ProcessInfo.from_dict(p) for p in data.get("processes", [])],
            failures=[Failure.from_dict(f) for f in data.get("failures", [])],
            jobs=[JobInfo.from_dict(j) for j in data.get("jobs", [])],
            hosts=[str(h) for h in data.get("hosts", [])],
            samples=int(data.get("samples", 1)),
            interval=float(data.get("interval", 0.0)),
            native=bool(data.get("native", False)),
            seconds=float(data.get("seconds", 0.0)),
        )
