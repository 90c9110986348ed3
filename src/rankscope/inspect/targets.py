"""Which processes `fds` and `strace` look at: the pids named, or every rank of the jobs on this node.

A named launcher (torchrun, mpirun, srun's slurmstepd ...) stands for its workers, as in
`rankscope stacks --pid`; a named worker gets its rank.
"""

from __future__ import annotations

from typing import Optional

from rankscope.errors import NothingFoundError
from rankscope.model import RankId
from rankscope.procs import ProcessTable, find_jobs, launcher_kind, workers_of

Target = tuple[int, Optional[RankId]]


def job_targets() -> list[Target]:
    """(pid, rank) of every worker of every distributed job on this node, by rank.

    Raises :class:`NothingFoundError` when there is none.
    """
    jobs = find_jobs(ProcessTable())
    found: list[Target] = [(worker.pid, worker.rank) for job in jobs for worker in job.workers]
    if not found:
        raise NothingFoundError(
            "no distributed job on this node (no process with a rank in its environment under a launcher)",
            "name the process instead: rankscope fds PID",
        )
    return found


def pid_targets(pids: tuple[int, ...]) -> list[Target]:
    """The pids named, a launcher replaced by its workers; a pid not found stays (its error comes later)."""
    table = ProcessTable()
    found: list[Target] = []
    for pid in pids:
        entry = table.procs.get(pid)
        if entry is None or entry.state in ("Z", "X"):
            found.append((pid, None))
        elif launcher_kind(entry) is not None:
            workers = workers_of(pid, table).workers
            found.extend((worker.pid, worker.rank) for worker in workers) if workers else found.append(
                (pid, None)
            )
        else:
            found.append((pid, workers_of(pid, table).workers[0].rank))
    return found
