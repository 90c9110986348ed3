"""Hostile flight-recorder dumps, made on the spot: what a job's user (or a broken writer) can leave
where root's `rankscope fr` reads."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

FRAME = {"name": "step", "filename": "/job/train.py", "line": 12}


def entry(seq: int, pg: str = "0", desc: str = "default_pg", op: str = "all_reduce", **extra: Any) -> dict:
    return {
        "record_id": seq,
        "collective_seq_id": seq,
        "profiling_name": f"gloo:{op}",
        "process_group": [pg, desc],
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "state": "scheduled",
        "retired": True,
        **extra,
    }


def shared_reference_pickle(path: Path, entries: int = 20_000, frames: int = 20_000) -> int:
    """One frame dict referenced ``frames`` times in one list, that list referenced by every entry:
    a pickle of well under 1 MB that stands for entries x frames frames. Returns its size."""
    stack = [FRAME] * frames
    sizes = [[4]] * 2
    raw = {
        "version": "2.10",
        "entries": [
            {
                "collective_seq_id": i,
                "profiling_name": "gloo:all_reduce",
                "frames": stack,
                "input_sizes": sizes,
            }
            for i in range(1, entries + 1)
        ],
    }
    data = pickle.dumps(raw, protocol=4)
    path.write_bytes(data)
    return len(data)


def sparse_json(path: Path, size: int = 1 << 30) -> None:
    """A dump that starts like JSON and is ``size`` bytes long (sparse: it costs no disk)."""
    with open(path, "wb") as out:
        out.write(b'{"version": "2.10", "entries": [')
        out.truncate(size)


def json_dump(path: Path, entries: list[dict]) -> None:
    path.write_text(json.dumps({"version": "2.10", "entries": entries}))


def fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)
