"""``printflock``: a print that holds an exclusive lock while it writes and flushes.

``flock`` excludes other processes of the same user (other ranks on this node); a threading
lock excludes other threads of this process, which share the lock file's descriptor. Both are
re-created in a forked child, where the parent's could be held by a thread that no longer
exists.

The lock file is per user (``rankscope-printflock-<uid>.lock`` in the temporary directory), so
one user's lock never stands in another user's way. It is opened with ``O_NOFOLLOW`` and used
only when it is a regular file owned by this user: a file another user planted at the path
could otherwise be held locked by them forever. Whenever the lock cannot be had, the line is
printed without it (one warning per process on stderr): a training job never gets an exception
or a hang from the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
import tempfile
import threading
from typing import Any, Optional

#: Environment variable naming the lock file instead of the per-user default.
LOCK_FILE_ENV = "RANKSCOPE_PRINTFLOCK_FILE"

_thread_lock = threading.Lock()
_lock_fd: Optional[int] = None
_failed = False  # the lock could not be had in this process: print without it
_warned = False  # at most one warning per process, kept across fork
_pid = os.getpid()
_path = "(none)"  # the lock file last tried, for the warning


def lock_path() -> str:
    """The lock file of this user: ``$RANKSCOPE_PRINTFLOCK_FILE`` or ``<tmp>/rankscope-printflock-<uid>.lock``."""
    override = os.environ.get(LOCK_FILE_ENV)
    if override:
        return override
    return os.path.join(tempfile.gettempdir(), f"rankscope-printflock-{os.geteuid()}.lock")


def _reset_after_fork() -> None:
    global _thread_lock, _lock_fd, _failed, _pid
    _thread_lock = threading.Lock()
    if _lock_fd is not None:
        with contextlib.suppress(OSError):
            os.close(_lock_fd)  # the parent's lock lives on through its own descriptor
    _lock_fd = None  # flock locks belong to the open file: the child opens its own
    _failed = False
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _warn(path: str, why: str) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    with contextlib.suppress(Exception):
        sys.stderr.write(f"rankscope printflock: lock {path} unusable ({why}); printing without it\n")
        sys.stderr.flush()


def _open_lock() -> Optional[int]:
    """This user's lock descriptor, or None (after one warning) when it cannot be had safely."""
    global _path
    path = "(none)"
    try:
        path = _path = lock_path()
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
    except Exception as exc:  # noqa: BLE001 - nothing may reach the training loop
        _warn(path, f"{type(exc).__name__}: {exc}")
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            why = "not a regular file"
        elif info.st_uid != os.geteuid():
            why = f"owned by uid {info.st_uid}, not {os.geteuid()}"
        else:
            return fd
    except Exception as exc:  # noqa: BLE001
        why = f"{type(exc).__name__}: {exc}"
    with contextlib.suppress(OSError):
        os.close(fd)
    _warn(path, why)
    return None


def _acquire() -> Optional[int]:
    """Take the file lock; the descriptor to release, or None when printing unlocked."""
    global _lock_fd, _failed
    if _failed:
        return None
    if _lock_fd is None:
        _lock_fd = _open_lock()
        if _lock_fd is None:
            _failed = True
            return None
    try:
        fcntl.flock(_lock_fd, fcntl.LOCK_EX)
    except OSError as exc:
        _warn(_path, f"{type(exc).__name__}: {exc}")
        return None
    return _lock_fd


def printflock(*args: Any, **kwargs: Any) -> None:
    """``print(*args, **kwargs)`` (flushed) while holding this user's node-wide print lock.

    The lock never raises: when it cannot be had the line is printed without it. Errors of
    ``print`` itself (a bad keyword, a closed file) are raised as ``print`` raises them.
    Use ``from rankscope.inproc import printflock as print`` to convert a whole module.
    """
    kwargs.setdefault("flush", True)
    if _pid != os.getpid():  # forked without the at-fork hooks (a fork from C code)
        _reset_after_fork()
    with _thread_lock:
        fd = _acquire()
        try:
            print(*args, **kwargs)
            stream = kwargs.get("file") or sys.stdout
            if stream is not None:
                stream.flush()
        finally:
            if fd is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
