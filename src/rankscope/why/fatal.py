"""faulthandler's dumps in the job's output files (the I/O: the dumps are read by
rankscope.logs.fatal, shared with `logs errors`): the end of each file, where a rank that died
wrote its dump."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace

from rankscope.logs.fatal import NEEDLE, FatalDump, fatal_findings, parse_dumps

__all__ = ["FatalDump", "fatal_findings", "read_dumps"]

#: The end of each output file searched (the newest: a rank dies once).
TAIL_BYTES = 16 << 20


def read_dumps(paths: Iterable[tuple[str, str, int]]) -> list[FatalDump]:
    """The dumps in the end of each output file: (path, the name the report gives it, first byte).
    Lines are numbered when the file is read from its first byte; 0 when only its end is read."""
    out = []
    for path, name, start in paths:
        try:
            with open(path, "rb") as handle:
                offset = max(start, os.fstat(handle.fileno()).st_size - TAIL_BYTES)
                handle.seek(offset)
                data = handle.read(TAIL_BYTES)
        except OSError:
            continue
        if NEEDLE not in data:
            continue
        if offset > start:  # the end of the file only: its first line may be cut
            data = data[data.find(b"\n") + 1 :]
        for dump in parse_dumps(data.decode("utf-8", "replace"), name):
            out.append(dump if offset <= start else replace(dump, line=0))
    return out
