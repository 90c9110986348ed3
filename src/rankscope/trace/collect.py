"""The only I/O of the trace readers: find ``trace-*`` files and read their bytes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from rankscope.errors import BadInputError, NothingFoundError
from rankscope.trace.decode import TraceData, decode


def trace_files(target: str) -> list[Path]:
    """``target`` itself if it is a file, else the ``trace-*`` files under the directory (recursively)."""
    path = Path(target)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise BadInputError(
            f"{target}: no such file or directory", "pass the --out directory of rankscope trace run"
        )
    found = sorted(p for p in path.rglob("trace-*") if p.is_file() and not p.is_symlink())
    if not found:
        raise NothingFoundError(
            f"no trace-* files under {target}", "run the job with rankscope trace run --out DIR"
        )
    return found


def read_trace(path: Path, last: Optional[int] = None) -> TraceData:
    """One file decoded (``last``: its newest events only, see decode); an unreadable or damaged
    file raises BadInputError (one line)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise BadInputError(f"{path}: {exc.strerror or exc}", "check the path and its permissions") from None
    return decode(os.fspath(path), data, last)
