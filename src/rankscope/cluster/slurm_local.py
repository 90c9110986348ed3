"""On one node: the processes that belong to one SLURM job (a node may run several jobs).

``rankscope stacks --jobid J`` passes ``--slurm-job J`` to every node so that only J's
processes are dumped there, never a neighbour's job that shares the node.
"""

from __future__ import annotations

from typing import Optional

from rankscope import procfs
from rankscope.errors import NothingFoundError
from rankscope.procs import is_rankscope


def _job_of(entry: procfs.ProcfsEntry) -> Optional[str]:
    return entry.variable("SLURM_JOB_ID") or entry.variable("SLURM_JOBID")


def slurm_job_pids(jobid: str) -> list[int]:
    """The outermost Python processes of job ``jobid`` here (launchers, or workers started by srun);
    rankscope's own (a `rankscope watch` inside the job) are none of them."""
    procs = procfs.table()
    excluded = procfs.self_and_ancestors(procs)
    python = {
        pid: entry.ppid
        for pid, entry in procs.items()
        if pid not in excluded
        and _job_of(entry) == jobid
        and entry.is_python is True
        and not is_rankscope(entry)
    }
    tops = sorted(pid for pid, ppid in python.items() if ppid not in python)
    if not tops:
        raise NothingFoundError(
            f"no Python process of SLURM job {jobid} on this node", "is the job's training running here yet?"
        )
    return tops
