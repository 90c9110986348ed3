"""Where a rank's DataLoader workers are, when the rank itself waits for them (I/O: py-spy).

A rank whose main thread waits in ``torch.utils.data.DataLoader``'s ``__next__`` (``num_workers > 0``)
only says the line of its ``for batch in loader``; what holds it is in a worker process (its child:
``__getitem__`` reading a file that never comes, a lock, a dead NFS mount). Those children carry the
rank's own environment and are never dumped as ranks (rankscope.procs); here each worker of such a
rank is dumped once, and its innermost user frame is the place the verdict names.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from rankscope import procfs

if TYPE_CHECKING:
    from rankscope.model import Frame
    from rankscope.stacks.report import StacksReport

#: The file of torch's DataLoader: a main thread with a frame in it waits for its batch.
DATALOADER = "torch/utils/data/dataloader.py"
#: At most this many workers of one rank are dumped.
MAX_WORKERS = 8


@dataclass(frozen=True)
class LoaderWorker:
    """One DataLoader worker of a rank that waits for its batch."""

    rank: int
    pid: int
    #: Its innermost user frame, ``function (file:line)``; None when it shows none (idle, or not dumped).
    location: Optional[str]


def waits_for_loader(frames: Sequence[Frame]) -> bool:
    return any(f.filename.endswith(DATALOADER) for f in frames)


def loader_ranks(report: StacksReport) -> dict[int, int]:
    """rank -> pid of the ranks whose main thread waits in a DataLoader's ``__next__``."""
    out = {}
    for group in report.main_groups():
        if waits_for_loader(group.frames):
            for member in group.members:
                if member.rank is not None:
                    out[member.rank] = member.pid
    return out


def dump_workers(report: StacksReport, deadline: float) -> list[LoaderWorker]:
    """Each live child of a rank that waits for its DataLoader, dumped by py-spy within ``deadline``
    (time.monotonic()); none when py-spy is missing."""
    from rankscope import lifetime
    from rankscope.errors import MissingToolError
    from rankscope.stacks.pyspy import parse_dump
    from rankscope.stacks.pyspy_cmd import dump_argv, find_pyspy, pyspy_env
    from rankscope.why.files import user_frame_words

    waiting = loader_ranks(report)
    if not waiting:
        return []
    try:
        pyspy = find_pyspy()
    except MissingToolError:
        return []
    table = procfs.table()
    out: list[LoaderWorker] = []
    for rank, pid in sorted(waiting.items()):
        children = sorted(c for c, e in table.items() if e.ppid == pid and e.state not in ("Z", "X"))
        for child in children[:MAX_WORKERS]:
            left = deadline - time.monotonic()
            if left <= 0.2:
                return out
            run = lifetime.run(
                dump_argv(pyspy, child), min(5.0, left), env=pyspy_env(), stderr=subprocess.DEVNULL
            )
            location = None
            if run.returncode == 0:
                try:
                    threads = parse_dump(run.text().encode(), child)
                except ValueError:
                    threads = []
                main = next((t for t in threads if t.is_main), threads[0] if threads else None)
                location = user_frame_words(main.frames) if main is not None else None
            out.append(LoaderWorker(rank, child, location))
    return out
