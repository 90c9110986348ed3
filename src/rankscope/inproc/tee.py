"""``Tee``: a rank's stdout (and stderr if asked) also written to its own file, flushed per write."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
from typing import IO, Optional

from rankscope.inproc._stream import StreamProxy
from rankscope.ranks import current_rank


class _TeeStream(StreamProxy):
    """Passes writes through; the file gets whole lines, each thread's pieces joined first.

    ``print`` writes its arguments, separators and newline in separate calls; without a
    per-thread line buffer, two threads printing at once would mix pieces inside one line.
    """

    def __init__(self, original: IO[str], owner: Tee) -> None:
        super().__init__(original)
        self._owner = owner
        self._local = threading.local()

    def write(self, text: str) -> int:
        written = self._original.write(text)
        self._original.flush()
        partial: str = getattr(self._local, "partial", "") + text
        cut = partial.rfind("\n") + 1
        self._local.partial = partial[cut:]
        if cut:
            self._owner.write_file(partial[:cut])
        return written

    def flush(self) -> None:
        partial: str = getattr(self._local, "partial", "")
        if partial:
            self._local.partial = ""
            self._owner.write_file(partial)
        self._original.flush()


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
        self._lock = threading.Lock()
        self._broken = False  # a write failed: stop copying, never raise into the job
        self._saved = (sys.stdout, sys.stderr)
        self._fd: Optional[int] = None
        try:
            directory = os.path.dirname(self.path)
            if directory:
                os.makedirs(directory, mode=0o700, exist_ok=True)  # new directories private
            # Never through a symbolic link: a link planted where the log goes must not redirect it.
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            # The job goes on without the copy; one line says why.
            why = "it is a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            with contextlib.suppress(Exception):
                sys.stderr.write(f"rankscope Tee: not copying output to {self.path}: {why}\n")
                sys.stderr.flush()
            return
        if hasattr(os, "register_at_fork"):
            # A thread of the parent may hold the lock at fork time; the child's copy would stay held.
            os.register_at_fork(after_in_child=self._new_lock)
        sys.stdout = _TeeStream(sys.stdout, self)
        if stderr:
            sys.stderr = _TeeStream(sys.stderr, self)

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def write_file(self, text: str) -> None:
        """Append whole lines to the file (O_APPEND: a forked child appends too).

        A write that fails (disk full, quota, a vanished network mount) never reaches the
        training loop: the copy stops, one line on the original stderr says so, and the
        stream itself goes on.
        """
        with self._lock:
            if self._fd is None or self._broken:
                return
            data = text.encode("utf-8", "replace")
            try:
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError as exc:
                self._broken = True
                with contextlib.suppress(Exception):
                    self._saved[1].write(f"rankscope Tee: stopped copying to {self.path}: {exc}\n")
                    self._saved[1].flush()

    def close(self) -> None:
        if self._fd is None:
            return
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, _TeeStream):
                stream.flush()
        sys.stdout, sys.stderr = self._saved
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> Tee:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
