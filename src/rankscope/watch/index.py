"""The watcher's files: a private ``--out`` directory, one timestamped directory per capture, and
``index.jsonl`` (one JSON line per capture, appended as each lands).

Everything is created 0700/0600 and never through a symbolic link; an existing ``--out`` is used as
it is (never chmodded).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

INDEX = "index.jsonl"


def private_dir(path: Path) -> Path:
    """``path`` as a directory (created 0700 with its parents when missing); OSError when it is a
    symbolic link or not a directory."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    os.close(fd)
    return path


def new_capture_dir(out: Path, reason: str, now: float | None = None) -> Path:
    """A new, empty directory under ``out`` named by the UTC time and the reason
    (``20261126T004512Z-stall``, ``-2`` and so on when one of that name exists)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    for serial in range(1, 1000):
        name = f"{stamp}-{reason}" + (f"-{serial}" if serial > 1 else "")
        try:
            os.mkdir(out / name, 0o700)
        except FileExistsError:
            continue
        return out / name
    raise FileExistsError(f"no free capture name under {out}")


def write_private(directory: Path, name: str, data: bytes) -> None:
    """Write a new file ``directory/name`` (0600; the directory created 0700 when missing); never
    through a link, never over an existing file."""
    directory.mkdir(mode=0o700, exist_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fd = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def append_index(out: Path, entry: dict[str, Any]) -> None:
    """One JSON line into ``out/index.jsonl`` (created 0600), in one write."""
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    dir_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = os.open(
            INDEX, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
        )
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def read_index(out: Path) -> list[dict[str, Any]]:
    """The index's entries (lines that do not parse are skipped)."""
    try:
        text = (out / INDEX).read_text(errors="replace")
    except OSError:
        return []
    entries = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries
