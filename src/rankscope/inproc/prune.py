"""Removing the stale files of a runtime directory (rankscope.inproc.runtime), by the rule of
rankscope.inproc.stale: `rankscope runtime prune`, and once a day after the commands that list the
directory (`stacks`, `why`, `watch`: :func:`after_listing`).

Command line only: never imported by a training process (rankscope.inproc.handler, progress and
bootstrap do not import it). Only a directory of the caller's own uid that passes runtime's own check
(a real directory, not a link, closed to group and others) is pruned. Names are looked at with
``lstat`` relative to the directory's descriptor and removed with ``unlinkat`` there: a symbolic link
is never followed, only regular files and FIFOs of the caller go, names outside the convention are
never touched, nor the files of a process whose description names another pid namespace (a container
sharing the directory). A file that vanished or may not be removed is counted, never raised. Work is bounded:
at most ``limit`` removals a call, the oldest first.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from dataclasses import dataclass, field
from typing import ClassVar, Dict, List, Optional, Set, Tuple

from rankscope import procfs
from rankscope.inproc import runtime
from rankscope.inproc.stale import DAY, KEEP_DAYS, Seen, old_enough, verdict

#: The most files one automatic run removes (a huge directory does not stall the command).
AUTO_LIMIT = 500
#: The file whose modification time says when the directory was last pruned automatically (not a
#: name of the convention: never pruned, never read as a process's file).
STAMP = runtime.PRUNE_STAMP
#: The most of a process's description read (a few hundred bytes when rankscope wrote it).
DESCRIPTION_MAX = 64 << 10


@dataclass(frozen=True)
class Removed:
    """A stale file: removed (or, with ``dry_run``, the one that would be)."""

    name: str
    pid: int
    kind: str
    reason: str
    #: Days since its last write.
    age_days: float


@dataclass(frozen=True)
class NotRemoved:
    name: str
    reason: str


@dataclass
class Pruned:
    """What one pruning run did to one directory."""

    SCHEMA: ClassVar[str] = "rankscope.runtime.prune/1"

    directory: str
    older_than_days: float
    dry_run: bool
    removed: List[Removed] = field(default_factory=list)
    #: Stale files that could not be removed (permission denied ...).
    failed: List[NotRemoved] = field(default_factory=list)
    #: Files of the convention kept: recent, or of a live process, or of another host.
    kept: int = 0
    #: Names left alone: not of the convention, links, directories, files of another owner.
    untouched: int = 0
    #: Stale files that vanished before they were removed (another run, the process itself).
    vanished: int = 0
    #: Stale files beyond this run's limit, left for the next one.
    left: int = 0


def open_own_dir(directory: str) -> int:
    """A descriptor of ``directory`` when it is the caller's private runtime directory.

    Raises FileNotFoundError when it is missing, runtime.UnsafeDirectory when it is a symbolic link,
    not a directory, another user's or open to group or others, OSError otherwise."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise runtime.UnsafeDirectory("not a directory (or a symbolic link)") from exc
        raise
    try:
        runtime.check_private(os.fstat(fd), os.getuid())
    except OSError:
        os.close(fd)
        raise
    return fd


def prune(
    directory: str,
    keep_days: float = KEEP_DAYS,
    dry_run: bool = False,
    limit: Optional[int] = None,
    host: Optional[str] = None,
) -> Pruned:
    """Remove the stale files of ``directory`` (see the module); raises as :func:`open_own_dir`."""
    fd = open_own_dir(directory)
    try:
        return prune_fd(fd, directory, keep_days, dry_run, limit, host)
    finally:
        os.close(fd)


def prune_fd(
    fd: int,
    directory: str,
    keep_days: float,
    dry_run: bool = False,
    limit: Optional[int] = None,
    host: Optional[str] = None,
) -> Pruned:
    """:func:`prune` in the directory open as ``fd`` (checked by :func:`open_own_dir`)."""
    from rankscope.ranks import short_hostname

    host = host or short_hostname()
    result = Pruned(directory, keep_days, dry_run)
    now = time.time()
    keep = keep_days * DAY
    uid = os.getuid()
    starts: Dict[int, Tuple[bool, Optional[float]]] = {}
    stale: List[Tuple[float, os.stat_result, Removed]] = []
    names = os.listdir(fd)
    elsewhere = _elsewhere(fd, names, host, procfs.pid_namespace())
    for name in names:
        parsed = runtime.parse_name(name)
        if parsed is None:
            result.untouched += 1
            continue
        file_host, _, pid, kind = parsed
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue  # gone already, or not ours to look at
        if st.st_uid != uid or not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            result.untouched += 1
            continue
        if not old_enough(file_host, st.st_mtime, host, now, keep):
            result.kept += 1
            continue
        if pid not in starts:
            starts[pid] = _process(pid)
        alive, started = starts[pid]
        seen = Seen(name, file_host, pid, kind, st.st_mtime, alive, started, pid in elsewhere)
        reason = verdict(seen, host, now, keep)
        if reason is None:
            result.kept += 1
            continue
        stale.append((st.st_mtime, st, Removed(name, pid, kind, reason, round((now - st.st_mtime) / DAY, 2))))
    stale.sort(key=lambda item: (item[0], item[2].name))  # the oldest first
    for _, st, item in stale:
        if limit is not None and len(result.removed) + len(result.failed) >= limit:  # tries, not successes
            result.left += 1
            continue
        if not dry_run:
            failure = _unlink(fd, item.name, st)
            if failure == "":
                result.vanished += 1
                continue
            if failure is not None:
                result.failed.append(NotRemoved(item.name, failure))
                continue
        result.removed.append(item)
    return result


def _unlink(fd: int, name: str, seen: os.stat_result) -> Optional[str]:
    """Remove ``name`` if it is still the file judged: None when removed, "" when it vanished or was
    replaced meanwhile, else why it may not be removed."""
    try:
        now = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if (now.st_ino, now.st_mtime_ns) != (seen.st_ino, seen.st_mtime_ns):
            return ""  # written again (a live process) or replaced since it was judged
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _elsewhere(fd: int, names: List[str], host: str, namespace: int) -> Set[int]:
    """The pids whose description (``<base>.inproc``, JSON) names another pid namespace than
    ``namespace``: a process of a container that shares the directory, alive or not."""
    found: Set[int] = set()
    if not namespace:
        return found
    for name in names:
        parsed = runtime.parse_name(name)
        if parsed is None or parsed[0] != host or parsed[3] != "inproc":
            continue
        try:
            fd_file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd_file).st_mode):
                continue
            info = json.loads(os.read(fd_file, DESCRIPTION_MAX))
        except (OSError, ValueError):
            continue
        finally:
            os.close(fd_file)
        other = info.get("pid_namespace") if isinstance(info, dict) else None
        if isinstance(other, int) and other and other != namespace:
            found.add(parsed[2])
    return found


def _process(pid: int) -> Tuple[bool, Optional[float]]:
    """Whether a process has ``pid`` here, and when it started (seconds since the epoch) if /proc says."""
    try:
        os.stat(f"/proc/{pid}")
    except FileNotFoundError:
        return False, None
    except OSError:
        return True, None  # cannot tell: kept
    after_boot = procfs.started_after_boot(pid)
    if after_boot is None:
        return True, None
    return True, time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - after_boot)


def due(fd: int, now: float) -> bool:
    """Whether the directory open as ``fd`` was last pruned automatically a day ago or more (or never,
    or its stamp says a time to come: a clock set back). Marks it pruned now when it is due; a stamp
    that cannot be written says not due (a directory rankscope cannot write is not pruned either)."""
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(STAMP, dir_fd=fd, follow_symlinks=False)
        if 0 <= now - st.st_mtime < runtime.PRUNE_EVERY:
            return False
    try:
        stamp = os.open(
            STAMP,
            os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
            0o600,
            dir_fd=fd,
        )
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(stamp).st_mode):
            return False
        os.utime(stamp, (now, now))
    except OSError:
        return False
    finally:
        os.close(stamp)
    return True


def prune_daily(directory: str, keep_days: float = KEEP_DAYS, limit: int = AUTO_LIMIT) -> Optional[Pruned]:
    """:func:`prune` at most once a day per directory (the stamp is set before, so two commands at
    once do not both prune); None when not due, or when the directory is missing or not the caller's
    private one. Never raises OSError."""
    try:
        fd = open_own_dir(directory)
    except OSError:
        return None
    try:
        if not due(fd, time.time()):
            return None
        return prune_fd(fd, directory, keep_days, limit=limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def after_listing() -> None:
    """The caller's own runtime directory (from its environment, as runtime.runtime_dir says) pruned
    once a day: what `stacks`, `why` and `watch` call after their report. Never raises: the command's
    report and exit code are what count."""
    with contextlib.suppress(Exception):  # a bug here must not turn a printed report into exit code 1
        prune_daily(runtime.runtime_dir(os.environ, os.getuid()))
