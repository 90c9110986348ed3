"""``--out DIR``: the one writer of files a command keeps (stacks, node answers, per-rank logs).

Those files may hold stack locals, environments and log lines, so they are private from
their first byte: the directory is created 0700 (a directory that already exists is used as
it is and never chmodded: rankscope does not change what it did not create), files are
created 0600 with O_CREAT|O_EXCL|O_NOFOLLOW, so a file is always new and always rankscope's.
Nothing is written through a symbolic link inside it: the directory is opened once and every
file and subdirectory is opened relative to it with O_NOFOLLOW, so a link planted in a shared
directory makes the write fail instead of overwriting the file it points to. The path the user
typed may itself be a link to a directory (``~/out -> /scratch/out``).

An existing directory that is not empty is refused unless ``force`` (``--force``): rankscope
does not mix its files into someone else's. With ``force`` a regular file in the way is
unlinked and created anew (so it ends up 0600 and rankscope's, whatever it was); a symbolic
link or anything else in the way is still refused, never followed and never replaced.
"""

from __future__ import annotations

import os
import resource
import stat
from pathlib import Path
from typing import Union

import click

from rankscope.errors import BadInputError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW
#: ``--force`` of every verb with ``--out``.
FORCE_OPTION = click.option(
    "--force",
    is_flag=True,
    help="Write into a non-empty --out directory, replacing files of the same name (never links).",
)
FORCE_HINT = "pass an empty or new directory, or --force to replace files in it"


class OutDir:
    """A private output directory; :meth:`write` puts one file in it (or in a subdirectory of it)."""

    def __init__(self, path: Union[str, Path], force: bool = False) -> None:
        self.path = Path(path)
        self.force = force
        self._fds: dict[str, int] = {}
        #: (subdir, name) -> (st_dev, st_ino) of every file this writer created.
        self._created: dict[tuple[str, str], tuple[int, int]] = {}
        parent = self.path.parent
        if parent.exists() and not parent.is_dir():
            raise BadInputError(
                f"cannot write {self.path}: {parent} is not a directory", "pass --out a directory of yours"
            )
        #: Directories above the output directory that this writer created, deepest first.
        self.made_parents = [p for p in (parent, *parent.parents) if not os.path.lexists(p)]
        try:
            parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise self._fail(parent, exc) from exc
        self._fds[""], created = self._open_dir(None, str(self.path))
        #: Whether this writer created the directory (it did not exist before).
        self.created = created
        if not created and not force and os.listdir(self._fds[""]):
            self.close()
            raise BadInputError(
                f"{self.path} is not empty; rankscope does not mix its files into it", FORCE_HINT
            )

    def _fail(self, what: Union[str, Path], exc: OSError) -> BadInputError:
        reason = exc.strerror or str(exc)
        if os.path.islink(what):
            reason = "it is a symbolic link; rankscope does not write through links"
        return BadInputError(f"cannot write {what}: {reason}", "pass --out a directory of yours")

    def _open_dir(self, parent_fd: Union[int, None], name: str) -> tuple[int, bool]:
        """The directory's fd, and whether this call created it."""
        where = name if parent_fd is None else self.path / name
        created = True
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            created = False
        except OSError as exc:
            raise self._fail(where, exc) from exc
        try:
            flags = _DIR_FLAGS if parent_fd is not None else _DIR_FLAGS & ~os.O_NOFOLLOW
            return os.open(name, flags, dir_fd=parent_fd), created
        except OSError as exc:
            raise self._fail(where, exc) from exc

    def subdir(self, name: str) -> str:
        """Create (0700) a subdirectory once; returns the name to pass to :meth:`write`."""
        if name not in self._fds:
            _check_name(name)
            self._fds[name] = self._open_dir(self._fds[""], name)[0]
        return name

    def _where(self, name: str, subdir: str) -> Path:
        return self.path / subdir / name if subdir else self.path / name

    def _create(self, name: str, subdir: str) -> int:
        """A new file (0600) for ``DIR/[subdir/]name``; with force, a regular file in the way is unlinked first."""
        _check_name(name)
        fd_dir = self._fds[self.subdir(subdir)] if subdir else self._fds[""]
        where = self._where(name, subdir)
        if self.force:
            try:
                old = os.stat(name, dir_fd=fd_dir, follow_symlinks=False)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise self._fail(where, exc) from exc
            else:
                if stat.S_ISLNK(old.st_mode):
                    raise self._fail(where, OSError(0, "it is a symbolic link"))
                if not stat.S_ISREG(old.st_mode):
                    raise BadInputError(
                        f"cannot write {where}: something that is not a file is there", FORCE_HINT
                    )
                try:
                    os.unlink(name, dir_fd=fd_dir)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise self._fail(where, exc) from exc
        try:
            fd = os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=fd_dir)
        except FileExistsError as exc:
            if os.path.islink(where):
                raise self._fail(where, exc) from exc
            raise BadInputError(
                f"cannot write {where}: a file of that name appeared while writing", FORCE_HINT
            ) from exc
        except OSError as exc:
            raise self._fail(where, exc) from exc
        info = os.fstat(fd)
        self._created[(subdir, name)] = (info.st_dev, info.st_ino)
        return fd

    def write(self, name: str, data: Union[bytes, str], subdir: str = "") -> Path:
        """Write ``data`` to a new ``DIR/[subdir/]name`` (0600, never through a link); returns its path."""
        payload = data.encode() if isinstance(data, str) else data
        with os.fdopen(self._create(name, subdir), "wb") as handle:
            handle.write(payload)
        return self._where(name, subdir)

    def open(self, name: str, subdir: str = "") -> int:
        """A file descriptor for streaming writes into a new ``DIR/[subdir/]name`` (0600, never through a link)."""
        return self._create(name, subdir)

    def reopen(self, name: str, subdir: str = "") -> int:
        """Open again, for appending, a file :meth:`open` created (closed meanwhile to bound open files).

        Refused when the name now holds anything but that same file (a link, a replacement).
        """
        where = self._where(name, subdir)
        known = self._created.get((subdir, name))
        if known is None:
            raise BadInputError(
                f"refusing to reopen {where}: rankscope did not create it", "this is a bug: report it"
            )
        fd_dir = self._fds[subdir] if subdir else self._fds[""]
        try:
            fd = os.open(name, _APPEND_FLAGS, dir_fd=fd_dir)
        except OSError as exc:
            raise self._fail(where, exc) from exc
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != known:
            os.close(fd)
            raise BadInputError(
                f"cannot write {where}: it was replaced while rankscope was writing it", FORCE_HINT
            )
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> OutDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_out_dir(path: Union[str, Path, None], force: bool) -> None:
    """Refuse a bad ``--out`` before any work is done (the same checks :class:`OutDir` makes when it writes).

    Creates the directory (0700) when it is new, so a later write finds it as this check left it.
    A directory this check created and nothing was written into is removed when the command
    ends (a run that found nothing leaves no empty directory behind); only that same directory
    (device and inode) and only while it is empty.
    """
    if path is None:
        return
    out = OutDir(path, force)
    out.close()
    context = click.get_current_context(silent=True)
    if out.created and context is not None:
        made = [Path(path), *out.made_parents]
        identities = [_identity(p) for p in made]
        context.call_on_close(lambda: _remove_while_empty(made, identities))


def _identity(path: Path) -> tuple[int, int]:
    try:
        info = os.lstat(path)
    except OSError:
        return (-1, -1)
    return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else (-1, -1)


def _remove_while_empty(made: list[Path], identities: list[tuple[int, int]]) -> None:
    """Remove the directories a run created, deepest first, while each is the same one and empty."""
    for path, identity in zip(made, identities):
        if identity == (-1, -1) or _identity(path) != identity:
            return
        try:
            os.rmdir(path)  # fails as soon as anything is in it: then everything above stays too
        except OSError:
            return


def open_files_allowed() -> int:
    """How many output files a streaming writer may keep open: half of what is left under
    RLIMIT_NOFILE after 64 for everything else, from 8 to 1024."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(8, min(1024, (soft - 64) // 2))


def _check_name(name: str) -> None:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise BadInputError(f"refusing to write a file named {name!r}", "this is a bug: report it")
