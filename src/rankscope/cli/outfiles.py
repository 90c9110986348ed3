"""``--out DIR``: the one writer of files a command keeps (stacks, node answers, per-rank logs).

Those files may hold stack locals, environments and log lines, so they are private from
their first byte: the directory is created 0700 (a directory that already exists is used as
it is and never chmodded: rankscope does not change what it did not create), files are
created 0600. Nothing is written through a symbolic link inside it: the directory is opened
once and every file and subdirectory is opened relative to it with O_NOFOLLOW, so a link planted
in a shared directory makes the write fail instead of overwriting the file it points to. The
path the user typed may itself be a link to a directory (``~/out -> /scratch/out``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

from rankscope.errors import BadInputError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW


class OutDir:
    """A private output directory; :meth:`write` puts one file in it (or in a subdirectory of it)."""

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)
        self._fds: dict[str, int] = {}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise self._fail(self.path.parent, exc) from exc
        self._fds[""] = self._open_dir(None, str(self.path))

    def _fail(self, what: Union[str, Path], exc: OSError) -> BadInputError:
        reason = exc.strerror or str(exc)
        if os.path.islink(what):
            reason = "it is a symbolic link; rankscope does not write through links"
        return BadInputError(f"cannot write {what}: {reason}", "pass --out a directory of yours")

    def _open_dir(self, parent_fd: Union[int, None], name: str) -> int:
        where = name if parent_fd is None else self.path / name
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            pass
        except OSError as exc:
            raise self._fail(where, exc) from exc
        try:
            flags = _DIR_FLAGS if parent_fd is not None else _DIR_FLAGS & ~os.O_NOFOLLOW
            return os.open(name, flags, dir_fd=parent_fd)
        except OSError as exc:
            raise self._fail(where, exc) from exc

    def subdir(self, name: str) -> str:
        """Create (0700) a subdirectory once; returns the name to pass to :meth:`write`."""
        if name not in self._fds:
            _check_name(name)
            self._fds[name] = self._open_dir(self._fds[""], name)
        return name

    def write(self, name: str, data: Union[bytes, str], subdir: str = "") -> Path:
        """Write ``data`` to ``DIR/[subdir/]name`` (0600, never through a link); returns its path."""
        _check_name(name)
        fd_dir = self._fds[self.subdir(subdir)] if subdir else self._fds[""]
        path = self.path / subdir / name if subdir else self.path / name
        payload = data.encode() if isinstance(data, str) else data
        try:
            fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=fd_dir)
        except OSError as exc:
            raise self._fail(path, exc) from exc
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        return path

    def open(self, name: str, subdir: str = "") -> int:
        """A file descriptor for streaming writes into ``DIR/[subdir/]name`` (0600, never through a link)."""
        _check_name(name)
        fd_dir = self._fds[self.subdir(subdir)] if subdir else self._fds[""]
        try:
            return os.open(name, _FILE_FLAGS, 0o600, dir_fd=fd_dir)
        except OSError as exc:
            raise self._fail(self.path / subdir / name, exc) from exc

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> OutDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_name(name: str) -> None:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise BadInputError(f"refusing to write a file named {name!r}", "this is a bug: report it")
