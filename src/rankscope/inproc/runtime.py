"""Where a process's rankscope files live: one private directory per user, files named by pid.

The convention (written by the training process, read from the outside by ``rankscope stacks``):

- the directory is ``$RANKSCOPE_RUNTIME_DIR`` when set, else ``${TMPDIR:-/tmp}/rankscope-<uid>``;
  an outside reader computes it from the target's own environment (``/proc/PID/environ``) and uid;
- it is created 0700 by its user; an existing one is used only when it is a real directory (not a
  symbolic link), owned by that user and not open to group or others: otherwise nothing is written;
- files are ``<host>.pid-<pid>.<kind>`` or, when the rank is known at creation,
  ``<host>.rank-<rank>.pid-<pid>.<kind>``; they are created 0600 relative to the directory's
  descriptor, never through a symbolic link (``O_NOFOLLOW``).

Kinds: ``progress`` (rankscope.progress), ``inproc`` (the handler's description, JSON), ``req`` (the
request FIFO), ``<id>.reply`` (answers to requests), ``<id>.fr`` (flight recorder dumps), ``crash``
(faulthandler's dump when the process died of a fatal signal), ``term`` (its dump at SIGTERM).

Python 3.9 compatible, standard library only: imported inside training processes.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from typing import Dict, Iterable, Mapping, Optional

#: Overrides the directory (a shared file system for nodes without a private /tmp, say).
ENV_DIR = "RANKSCOPE_RUNTIME_DIR"
#: The environment variables :func:`runtime_dir` reads.
PLACE_VARIABLES = (ENV_DIR, "TMPDIR")

#: The file whose modification time says when the directory was last pruned (rankscope.inproc.prune).
PRUNE_STAMP = ".pruned"
#: How often the commands that list the directory prune it.
PRUNE_EVERY = 86400.0

_NAME = re.compile(r"^(?P<host>.+?)\.(?:rank-(?P<rank>\d+)\.)?pid-(?P<pid>\d+)\.(?P<kind>[A-Za-z0-9_.-]+)$")


class UnsafeDirectory(OSError):
    """The runtime directory exists but is not private to this user (or is a symbolic link)."""


def runtime_dir(environ: Mapping[str, str], uid: int) -> str:
    """The directory of a process with this environment and uid."""
    explicit = environ.get(ENV_DIR)
    if explicit:
        return explicit
    return os.path.join(environ.get("TMPDIR") or "/tmp", f"rankscope-{uid}")


def file_name(host: str, pid: int, kind: str, rank: Optional[int] = None) -> str:
    where = f"rank-{rank}.pid-{pid}" if rank is not None else f"pid-{pid}"
    return f"{host}.{where}.{kind}"


def parse_name(name: str) -> Optional[tuple[str, Optional[int], int, str]]:
    """(host, rank, pid, kind) of a file name of the convention; ``None`` for any other name."""
    match = _NAME.match(name)
    if match is None:
        return None
    rank = match.group("rank")
    return match.group("host"), int(rank) if rank else None, int(match.group("pid")), match.group("kind")


def check_private(st: os.stat_result, uid: int) -> None:
    """Raise UnsafeDirectory unless ``st`` is a directory of ``uid`` closed to group and others."""
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectory("not a directory (or a symbolic link)")
    if st.st_uid != uid:
        raise UnsafeDirectory(f"owned by uid {st.st_uid}, not {uid}")
    if st.st_mode & 0o077:
        raise UnsafeDirectory(f"mode {stat.S_IMODE(st.st_mode):o} is open to group or others")


def open_private_dir(path: str) -> int:
    """A descriptor of ``path``, created 0700 if missing, checked private; raises OSError otherwise."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        check_private(os.fstat(fd), os.getuid())
    except OSError:
        os.close(fd)
        raise
    return fd


def open_file(dir_fd: int, name: str, flags: int = os.O_RDWR) -> int:
    """Open (creating 0600) ``name`` inside the directory ``dir_fd``, never through a symbolic link."""
    return os.open(name, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)


def files_of(directory: str, pid: int, host: Optional[str] = None) -> dict[str, str]:
    """{kind: path} of the files of ``pid`` (on ``host`` when given) in ``directory``; {} if none or unreadable."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    found: dict[str, str] = {}
    mark = f"pid-{pid}."
    for name in names:
        if mark not in name:  # cheap: most names are other processes' (a shared /tmp)
            continue
        parsed = parse_name(name)
        if parsed is None or parsed[2] != pid or (host is not None and parsed[0] != host):
            continue
        found[parsed[3]] = _newest(found.get(parsed[3]), os.path.join(directory, name))
    return found


def _newest(known: Optional[str], path: str) -> str:
    """Of two files of one pid and kind, the one written last. A pid is reused: a shared directory
    can hold an earlier process's file under the same pid (another rank, even), whose marker the
    reader then refuses as another process's, and the live one was not shown (seen in the test
    suite, thousands of processes on one machine)."""
    if known is None:
        return path
    try:
        return path if os.lstat(path).st_mtime_ns > os.lstat(known).st_mtime_ns else known
    except OSError:
        return known


def files_of_pids(
    directory: str, pids: Iterable[int], host: Optional[str] = None
) -> Dict[int, Dict[str, str]]:
    """:func:`files_of` for several pids with one listing: {pid: {kind: path}} (a pid with no file is absent).

    Each name is looked at once, not once per pid: a shared directory holds files of many earlier
    processes (hundreds on a busy machine), and a 16-rank job asked each name 16 times."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    wanted = set(pids)
    found: Dict[int, Dict[str, str]] = {}
    for name in names:
        start = name.find(".pid-")
        if start < 0:
            continue
        end = name.find(".", start + 5)
        digits = name[start + 5 : end]
        if not digits.isdigit() or int(digits) not in wanted:
            continue  # cheap: most names are other processes'
        parsed = parse_name(name)
        if parsed is None or parsed[2] not in wanted or (host is not None and parsed[0] != host):
            continue
        kinds = found.setdefault(parsed[2], {})
        kinds[parsed[3]] = _newest(kinds.get(parsed[3]), os.path.join(directory, name))
    return found


class NotOwned(OSError):
    """A file in a runtime directory that is not the process's own (another owner, a link, another type)."""


def open_owned(path: str, flags: int, uid: int, fifo: bool = False) -> int:
    """Open ``path`` for a reader from the outside (often root): only a file of ``uid`` itself.

    Never through a symbolic link, and never waiting: ``O_NONBLOCK``, so a FIFO planted where a
    regular file should be does not block ``open`` (it is refused after opening). A regular file
    with one link (a hard link planted to a file of another user, root's say, is refused: rankscope
    writes some of these files), or a FIFO when ``fifo`` is set.
    """
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if st.st_uid != uid:
            raise NotOwned(f"{path} is owned by uid {st.st_uid}, not the process's uid {uid}")
        if fifo and not stat.S_ISFIFO(st.st_mode):
            raise NotOwned(f"{path} is not a FIFO")
        if not fifo and (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1):
            raise NotOwned(f"{path} is not a regular file with a single link")
    except OSError:
        os.close(fd)
        raise
    return fd


class TooLarge(OSError):
    """A file of a runtime directory larger than its reader reads."""


def read_owned(path: str, uid: int, limit: int) -> bytes:
    """The bytes of a regular file of ``uid`` (see :func:`open_owned`); TooLarge past ``limit`` bytes."""
    fd = open_owned(path, os.O_RDONLY, uid)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise TooLarge(f"{path} holds {size} bytes, more than the {limit} read")
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise TooLarge(f"{path} grew past the {limit} bytes read")
        return data
    finally:
        os.close(fd)


def prune_may_be_due(directory: str, now: float) -> bool:
    """Whether the daily pruning of ``directory`` may be due: it exists and its stamp is missing or a
    day old. One ``stat`` or two, so that a command that prints its report first pays no import of the
    pruning when it is not (rankscope.inproc.prune decides for good, under its own checks)."""
    try:
        st = os.stat(os.path.join(directory, PRUNE_STAMP), follow_symlinks=False)
    except FileNotFoundError:
        return os.path.isdir(directory)
    except OSError:
        return False
    return not 0 <= now - st.st_mtime < PRUNE_EVERY
