"""A job stopped from outside (pure): the launcher itself got a signal and stopped its workers.

torchrun's agent writes, when it is sent SIGTERM, SIGINT or SIGHUP (``api.py``; torch 2.x names the
signal, earlier versions its number)::

    W1126 10:11:02.131000 140029 torch/distributed/elastic/agent/server/api.py:704] Received 15 death signal, shutting down workers
    WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers
    ... api.py:719] Received Signals.SIGTERM death signal, shutting down workers

then its own ``SignalException: Process N got signal: 15`` traceback, and the workers die of the
signal it forwards (their ``KeyboardInterrupt`` tracebacks after SIGINT). Nothing in the job failed:
the scheduler (a time limit, preemption, scancel), Kubernetes (a pod deleted or evicted), a person
(Ctrl-C, kill) or a closed terminal (SIGHUP: the ssh session that started it ended) stopped it. It is
the explanation of last resort (kind ``launcher_summary``): any rank's own failure, a death or a hang
in the same log is the stronger story (srun, for one, stops the other nodes' launchers with SIGTERM
after a task failed).
"""

from __future__ import annotations

import re
from typing import Optional

from rankscope.evidence import CULPRIT, Finding, Kind

STOPPED = "stopped_from_outside"
NEEDLE = b"death signal"
_DEATH = re.compile(rb"Received (?:Signals\.SIG([A-Z]+)|(\d+)) death signal, shutting down workers")
_NUMBERS = {"HUP": 1, "INT": 2, "TERM": 15, "QUIT": 3, "USR1": 10, "USR2": 12}

_WHO = {
    1: (
        "SIGHUP: the terminal or ssh session that started it closed",
        "run the launcher under tmux or screen, with `setsid nohup ...`, or through the scheduler, so that "
        "it outlives the session that started it",
    ),
    2: (
        "SIGINT: Ctrl-C in its terminal, or kill -INT",
        "nothing in the job failed; if it was stopped because it hung, `rankscope why` (or `rankscope watch`) "
        "on the next run says where",
    ),
    15: (
        "SIGTERM: the scheduler (a time limit, preemption, scancel), Kubernetes (a pod deleted or evicted), "
        "or kill",
        "nothing in the job failed: find who sent it (`sacct -j JOB -o JobID,State,ExitCode`, the "
        "scheduler's log, `kubectl describe pod`, `kubectl get events`) and resume from the last checkpoint",
    ),
}


def signal_of(line: bytes) -> Optional[int]:
    """The signal number of torchrun's ``Received N death signal`` line, else None."""
    found = _DEATH.search(line)
    if found is None:
        return None
    name, number = found.groups()
    return int(number) if number is not None else _NUMBERS.get(name.decode(), 0)


def stopped_finding(signal: int, who: Optional[str], source: str, line: int, order: int, by: str) -> Finding:
    """The job stopped by ``signal``: ``by`` is what said so (``torchrun``, ``every rank's KeyboardInterrupt``)."""
    how, step = _WHO.get(signal, (f"signal {signal}", _WHO[15][1]))
    where = f" on {who}" if who else ""
    return Finding(
        Kind.LAUNCHER_SUMMARY,
        STOPPED,
        CULPRIT,
        None,  # a node, not a rank: its launcher's summary of a rank is another finding (evidence.culprits)
        f"the job was stopped from outside: {by}{where} got {how}",
        None,
        source,
        line,
        order,
        next_step=step,
    )
