"""Which files of a runtime directory (rankscope.inproc.runtime) are stale: the pure rule.

A file is stale when it was last written longer ago than the keep period AND the process that wrote
it is gone: no process has its pid any more, or the one that has it started after the file was last
written (a later process given the same pid). The keep period lets ``rankscope why`` read the crash
and SIGTERM dumps of a job that ended days ago. A file of another host (a runtime directory on a
shared file system), or of a process in another pid namespace, is never judged here: this process
table says nothing of those pids.

No I/O: rankscope.inproc.prune reads the directory and /proc and acts on the verdict. Used by the
command line only, never inside a training process (Python 3.9 all the same, like its package).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

DAY = 86400.0
#: Files younger than this are kept, whoever wrote them.
KEEP_DAYS = 7.0
#: A process that started less than this after a file's last write may be the file's own writer: the
#: clock that dates files and the boot clock that dates processes part by NTP's steps and slewing.
SLACK = 3600.0

#: Reasons a file is stale (its verdict's words).
ENDED = "its process ended"
REUSED = "its pid now belongs to a later process"


@dataclass(frozen=True)
class Seen:
    """One file of the naming convention, as the file system and /proc show it."""

    name: str
    host: str
    pid: int
    kind: str
    #: Last modification, seconds since the epoch.
    written: float
    #: Whether a process has the pid now.
    alive: bool
    #: When that process started, seconds since the epoch (None: alive but /proc does not say).
    started: Optional[float] = None
    #: Its process described itself (``<base>.inproc``) in another pid namespace than this one's
    #: (a container sharing /tmp): this process table says nothing of its pid.
    elsewhere: bool = False


def verdict(seen: Seen, host: str, now: float, keep: float) -> Optional[str]:
    """Why ``seen`` is stale (:data:`ENDED`, :data:`REUSED`), or None when it is kept.

    ``host``: this node's short name (files of other hosts are kept); ``keep``: seconds a file is
    kept after its last write, whatever its process."""
    if seen.elsewhere or not old_enough(seen.host, seen.written, host, now, keep):
        return None
    if not seen.alive:
        return ENDED
    if seen.started is not None and seen.started > seen.written + SLACK:
        return REUSED
    return None


def old_enough(file_host: str, written: float, host: str, now: float, keep: float) -> bool:
    """Whether a file may be stale at all (this host's, older than ``keep``): the process table is
    asked only about such files."""
    return file_host == host and now - written >= keep
