"""Which processes `fds` and `strace` look at: the pids named, or every rank of the jobs on this node."""

from __future__ import annotations

from typing import Optional

from rankscope.errors import NothingFoundError
from rankscope.model import RankId
from rankscope.procs import ProcessTable, find_jobs


def job_targets() -> list[tuple[int, Optional[RankId]]]:
    """(pid, rank) of every worker of every distributed job on this node, by rank.

    Raises :class:`NothingFoundError` when there is none.
    """
    jobs = find_jobs(ProcessTable())
    found: list[tuple[int, Optional[RankId]]] = [
        (worker.pid, worker.rank) for job in jobs for worker in job.workers
    ]
    if not found:
        raise NothingFoundError(
            "no distributed job on this node (no process with a rank in its environment under a launcher)",
            "name the process instead: rankscope fds PID",
        )
    return found
