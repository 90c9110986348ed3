"""A DataLoader worker's death in a rank's traceback (pure): which signal, and what it means.

torch's DataLoader raises, in the rank, ``RuntimeError: DataLoader worker (pid(s) 7781) exited
unexpectedly``, caused by ``DataLoader worker (pid 7781) is killed by signal: Bus error. It is possible
that dataloader's workers are out of shared memory.`` (``signal_handling.py``: the worker's signal by
name: ``Killed``, ``Bus error``, ``Segmentation fault``, ``Aborted``). The rank's own line says only
that a worker went; the cause line says how, and each way has one usual reason on a training node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Optional

_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([A-Za-z ]+?)\.")

_STEPS = {
    "Killed": (
        "a DataLoader worker of this rank (pid {pid}) was killed by SIGKILL, most often the kernel's OOM "
        "killer (host memory: `dmesg -T | grep -i -e 'killed process {pid}' -e oom`, or the job's "
        "memory limit): fewer workers (num_workers), a smaller prefetch_factor, a dataset whose data "
        "the workers share rather than copy (memory-mapped files, numpy arrays instead of Python lists)"
    ),
    "Bus error": (
        "a DataLoader worker of this rank (pid {pid}) died of SIGBUS: /dev/shm is too small or full for "
        "the tensors the workers hand over (containers get 64 MB: docker --shm-size or --ipc=host, "
        "Kubernetes an emptyDir with medium: Memory on /dev/shm), or use fewer workers"
    ),
    "Segmentation fault": (
        "a DataLoader worker of this rank (pid {pid}) crashed in native code (an image or audio decoder, "
        "a library that is not fork-safe): run with num_workers=0 to get the crash in the rank itself, "
        "or multiprocessing_context='spawn'"
    ),
}


def worker_death_step(lines: Iterable[str]) -> Optional[str]:
    """What to do about a DataLoader worker's death named in a traceback's lines (its exception and the
    chained ones), or None."""
    for text in lines:
        found = _KILLED.search(text)
        if found is not None:
            step = _STEPS.get(found.group(2))
            return step.format(pid=found.group(1)) if step is not None else None
    return None
