"""Read a process's descriptors and socket tables (through rankscope.procfs) into a ProcessFds."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from typing import Optional

from rankscope import procfs
from rankscope.errors import BadInputError, ExitCode, RankscopeError
from rankscope.inspect.fdkinds import NET_TABLES, classify, counts_of, inode_of, socket_tables
from rankscope.inspect.report import FdKind, OpenFd, ProcessFds
from rankscope.model import RankId


class PermissionDeniedError(RankscopeError):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message, hint, ExitCode.PERMISSION_DENIED)


def living(pid: int, verb: str) -> procfs.ProcfsEntry:
    """The process, or the one-line :class:`BadInputError` for one that is gone or a zombie."""
    entry = procfs.process(pid)
    if entry is None:
        raise BadInputError(f"no process {pid}", "check the pid (ps -p PID); it may have exited")
    if entry.state in ("Z", "X"):
        raise BadInputError(
            f"pid {pid} has exited (a zombie its parent {entry.ppid} has not reaped): it holds nothing",
            f"look at the parent instead: rankscope {verb} {entry.ppid}",
        )
    return entry


def _is_dir(pid: int, fd: int, target: str) -> bool:
    if not target.startswith("/") or target.endswith(" (deleted)"):
        return False
    try:
        return stat.S_ISDIR(os.stat(f"/proc/{pid}/fd/{fd}").st_mode)
    except OSError:
        return False


def pipe_holders(inodes: set[int], besides: int) -> dict[int, list[str]]:
    """inode -> ``pid P (comm) fd N`` of every other process holding one of these pipes.

    It reads every process's descriptors on the node: 18 ms for 109 processes here, more on a
    node with thousands, hence only on request. Processes this user may not read are skipped.
    """
    holders: dict[int, list[str]] = {}
    for other, entry in procfs.table().items():
        if other == besides:
            continue
        try:
            links = procfs.fd_links(other)
        except OSError:
            continue
        for fd, target in links:
            if target.startswith("pipe:"):
                inode = inode_of(target)
                if inode in inodes:
                    holders.setdefault(inode, []).append(f"pid {other} ({entry.comm}) fd {fd}")
    return holders


def process_fds(pid: int, rank: Optional[RankId] = None, peers: bool = False) -> ProcessFds:
    """The classified descriptors of ``pid``; ``peers``: with the other holders of its pipes.

    Raises :class:`BadInputError` when there is no such process and
    :class:`PermissionDeniedError` when its descriptors may not be read (another user's).
    """
    entry = living(pid, "fds")
    try:
        links = procfs.fd_links(pid)
    except FileNotFoundError:
        raise BadInputError(f"no process {pid}", "check the pid (ps -p PID); it may have exited") from None
    except PermissionError:
        owner = procfs.uid(pid)
        raise PermissionDeniedError(
            f"cannot read the descriptors of pid {pid} (owned by uid {owner}; you are uid {os.geteuid()})",
            "run as the process owner or with sudo",
        ) from None
    inodes = (inode_of(target) for _, target in links if target.startswith("socket:"))
    wanted = {inode for inode in inodes if inode is not None}
    sockets = (
        socket_tables(((name, procfs.net_table(pid, name)) for name in NET_TABLES), wanted) if wanted else {}
    )
    fds = tuple(
        classify(fd, target, procfs.fdinfo(pid, fd), sockets, _is_dir(pid, fd, target))
        for fd, target in links
    )
    if peers:
        fds = _with_holders(pid, fds)
    soft, hard = procfs.open_files_limit(pid)
    command = " ".join(procfs.cmdline(pid)) or f"[{entry.comm}]"
    return ProcessFds(pid, command, fds, counts_of(fds), soft, hard, rank)


def _with_holders(pid: int, fds: tuple[OpenFd, ...]) -> tuple[OpenFd, ...]:
    pipes = {inode_of(entry.target) for entry in fds if entry.kind == FdKind.PIPE}
    holders = pipe_holders({inode for inode in pipes if inode is not None}, pid) if pipes else {}
    return tuple(
        replace(entry, holders=tuple(holders.get(inode_of(entry.target) or -1, ())))
        if entry.kind == FdKind.PIPE
        else entry
        for entry in fds
    )
