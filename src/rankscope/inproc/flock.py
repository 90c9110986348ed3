"""``printflock``: a print that holds an exclusive lock while it writes and flushes.

``flock`` excludes other processes (other ranks on this node); a threading lock excludes
other threads of this process, which share the lock file's descriptor. Both are
re-created in a forked child, where the parent's could be held by a thread that no longer
exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import tempfile
import threading
from typing import Any, Optional

#: The lock file every process on the node agrees on (override with RANKSCOPE_PRINTFLOCK_FILE).
DEFAULT_LOCK_FILE = os.path.join(tempfile.gettempdir(), "rankscope-printflock.lock")

_thread_lock = threading.Lock()
_lock_fd: Optional[int] = None


def _reset_after_fork() -> None:
    global _thread_lock, _lock_fd
    _thread_lock = threading.Lock()
    if _lock_fd is not None:
        with contextlib.suppress(OSError):
            os.close(_lock_fd)
    _lock_fd = None  # flock locks belong to the open file: the child opens its own


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _fd() -> int:
    global _lock_fd
    if _lock_fd is None:
        path = os.environ.get("RANKSCOPE_PRINTFLOCK_FILE", DEFAULT_LOCK_FILE)
        _lock_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    return _lock_fd


def printflock(*args: Any, **kwargs: Any) -> None:
    """``print(*args, **kwargs)`` (flushed) while holding the node-wide print lock.

    Use ``from rankscope.inproc import printflock as print`` to convert a whole module.
    """
    kwargs.setdefault("flush", True)
    with _thread_lock:
        fd = _fd()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            print(*args, **kwargs)
            stream = kwargs.get("file") or sys.stdout
            stream.flush()
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
