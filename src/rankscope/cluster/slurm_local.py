"""On one node: the processes that belong to one SLURM job (a node may run several jobs).

``rankscope stacks --jobid J`` passes ``--slurm-job J`` to every node so that only J's
processes are dumped there, never a neighbour's job that shares the node.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import psutil

from rankscope.errors import NothingFoundError


def _job_of(pid: int) -> Optional[str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in raw.split(b"\0"):
        if entry.startswith((b"SLURM_JOB_ID=", b"SLURM_JOBID=")):
            return entry.split(b"=", 1)[1].decode(errors="replace")
    return None


def _is_python(proc: psutil.Process) -> bool:
    try:
        argv0: str = proc.cmdline()[0]
    except (psutil.Error, IndexError):
        return False
    return str(os.path.basename(argv0)).startswith("python")


def slurm_job_pids(jobid: str) -> list[int]:
    """The outermost Python processes of job ``jobid`` here (launchers, or workers started by srun)."""
    me = psutil.Process()
    excluded = {me.pid, *(p.pid for p in me.parents())}
    python: dict[int, int] = {}
    for proc in psutil.process_iter(["pid", "ppid"]):
        pid = proc.info["pid"]
        if pid in excluded or _job_of(pid) != jobid or not _is_python(proc):
            continue
        python[pid] = proc.info["ppid"]
    tops = sorted(pid for pid, ppid in python.items() if ppid not in python)
    if not tops:
        raise NothingFoundError(
            f"no Python process of SLURM job {jobid} on this node", "is the job's training running here yet?"
        )
    return tops
