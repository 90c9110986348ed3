"""What `rankscope fds` and `rankscope strace` found, as data (one JSON form through rankscope.serial)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.model import Failure, RankId, Words
from rankscope.serial import OMIT_NONE


class FdKind(Words):
    FILE = "file"
    DELETED = "deleted file"
    DIRECTORY = "directory"
    SOCKET = "socket"
    PIPE = "pipe"
    EVENTFD = "eventfd"
    EPOLL = "epoll"
    ANON = "anon inode"
    GPU = "nvidia device"
    RDMA = "infiniband device"
    DEVICE = "device"
    OTHER = "other"


@dataclass(frozen=True)
class OpenFd:
    fd: int
    kind: FdKind
    #: What /proc/PID/fd/FD links to (``/data/x.bin``, ``socket:[1234]``, ``pipe:[99]``).
    target: str
    #: r, w or rw, plus ``append``/``nonblock`` when set (flags of /proc/PID/fdinfo).
    mode: str = ""
    offset: Optional[int] = field(default=None, metadata=OMIT_NONE)
    #: Sockets: tcp, tcp6, udp, udp6, unix (``None`` when the inode is in none of the process's tables).
    protocol: Optional[str] = field(default=None, metadata=OMIT_NONE)
    local: Optional[str] = field(default=None, metadata=OMIT_NONE)
    peer: Optional[str] = field(default=None, metadata=OMIT_NONE)
    state: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: An epoll's watched descriptors (``tfd:`` lines of its fdinfo).
    watches: tuple[int, ...] = ()
    #: A pipe's other holders, ``pid 123 (torchrun) fd 1`` (only when asked: ``--peers``).
    holders: tuple[str, ...] = ()

    def describe(self) -> str:
        """The descriptor in a few words: a path, ``tcp 127.0.0.1:5 -> 127.0.0.1:6 ESTABLISHED`` ..."""
        if self.kind == FdKind.SOCKET and self.protocol:
            text = f"{self.protocol} {self.local or '?'}"
            if self.peer:
                text += f" -> {self.peer}"
            return f"{text} {self.state}" if self.state else text
        if self.kind == FdKind.EPOLL and self.watches:
            return f"{self.target} watching fds {','.join(map(str, self.watches))}"
        if self.holders:
            return f"{self.target} also held by {', '.join(self.holders)}"
        return self.target


@dataclass(frozen=True)
class ProcessFds:
    pid: int
    command: str
    fds: tuple[OpenFd, ...]
    #: kind -> how many, in the order of FdKind.
    counts: dict[str, int]
    #: "Max open files" soft and hard limits (``None``: unlimited or unreadable).
    limit_soft: Optional[int] = None
    limit_hard: Optional[int] = None
    rank: Optional[RankId] = field(default=None, metadata=OMIT_NONE)

    @property
    def near_limit(self) -> bool:
        """At least 90% of the soft limit used: the next accept() or open() may fail with EMFILE."""
        return self.limit_soft is not None and len(self.fds) >= 0.9 * self.limit_soft

    def by_fd(self) -> dict[int, OpenFd]:
        return {entry.fd: entry for entry in self.fds}


@dataclass(frozen=True)
class FdsReport:
    SCHEMA: ClassVar[str] = "rankscope.fds/1"

    processes: tuple[ProcessFds, ...]
    failures: tuple[Failure, ...] = ()


@dataclass(frozen=True)
class SyscallCount:
    name: str
    calls: int
    errors: int
    #: Seconds spent inside the call, summed over the calls strace saw finish (-T).
    seconds: float = field(metadata={"round": 6})


@dataclass(frozen=True)
class Blocked:
    """A thread inside a call that had not returned when tracing stopped, or polling one in a loop."""

    tid: int
    syscall: str
    args: str
    #: Seconds from the call's start to the end of tracing (at least; it may have started earlier).
    waited: float = field(metadata={"round": 3})
    #: What it waits on, in words: ``fd 3: tcp 127.0.0.1:40000 -> 127.0.0.1:5000 ESTABLISHED``.
    on: str = ""
    #: The thread's name (/proc/PID/task/TID/comm: gloo, NCCL and pt_ threads name themselves).
    thread: str = ""
    #: 0: the call had not returned when tracing stopped. N > 0: the thread was between calls then,
    #: but its last N calls were this same wait, each ending with nothing (a timeout): a thread that
    #: polls (gloo's event loop waits 10 ms at a time) is waiting as surely as one blocked once.
    polls: int = 0


@dataclass(frozen=True)
class FailureGroup:
    errno: str
    message: str
    count: int
    #: syscall -> how many of the failures.
    syscalls: dict[str, int]
    #: Paths or addresses the failing calls named, most frequent first (at most a few).
    targets: tuple[str, ...] = ()
    #: A routine error (EAGAIN, ETIMEDOUT, EINTR ...): counted, not a finding.
    noise: bool = False


@dataclass(frozen=True)
class ProcessTrace:
    pid: int
    command: str
    seconds: float = field(metadata={"round": 3})
    threads: int = 0
    lines: int = 0
    syscalls: tuple[SyscallCount, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    failures: tuple[FailureGroup, ...] = ()
    #: The process's state letter after strace detached (R, S, D ...): it must still be running.
    state_after: str = ""
    #: True when rankscope had to SIGCONT it after detaching.
    continued: bool = False
    rank: Optional[RankId] = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class StraceReport:
    SCHEMA: ClassVar[str] = "rankscope.strace/1"

    processes: tuple[ProcessTrace, ...]
    failures: tuple[Failure, ...] = ()
