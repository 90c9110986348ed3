"""``Tee``: a rank's stdout (and stderr if asked) also written to its own file, flushed per write."""

from __future__ import annotations

import os
import sys
import threading
from typing import IO, Any, Optional

from rankscope.ranks import current_rank


class _TeeStream:
    def __init__(self, original: IO[str], fd: int, lock: threading.Lock) -> None:
        self._original = original
        self._fd = fd
        self._lock = lock

    def write(self, text: str) -> int:
        with self._lock:
            written = self._original.write(text)
            self._original.flush()
            if text:
                # O_APPEND: a forked child writing through the same descriptor appends too.
                os.write(self._fd, text.encode("utf-8", "replace"))
        return written

    def flush(self) -> None:
        self._original.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._original.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


class Tee:
    """Copy ``sys.stdout`` (and ``sys.stderr`` with ``stderr=True``) to ``path``.

    ``path`` may use ``{rank}``, ``{local_rank}`` and ``{host}`` (from the launcher's environment),
    e.g. ``Tee("logs/rank{rank}.log")``. The file is created 0600 and appended to. Use as a context
    manager or call :meth:`close` to restore the streams.
    """

    def __init__(self, path: str, stderr: bool = False) -> None:
        rank = current_rank()
        self.path = path.format(
            rank="" if rank.rank is None else rank.rank,
            local_rank="" if rank.local_rank is None else rank.local_rank,
            host=rank.host,
        )
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._fd: Optional[int] = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._lock = threading.Lock()
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout = _TeeStream(sys.stdout, self._fd, self._lock)
        if stderr:
            sys.stderr = _TeeStream(sys.stderr, self._fd, self._lock)

    def close(self) -> None:
        if self._fd is None:
            return
        sys.stdout, sys.stderr = self._saved
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> Tee:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
