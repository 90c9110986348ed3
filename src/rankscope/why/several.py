"""Several jobs on one node, each weighed apart.

`why` with no target looks at "the job on this node". On a shared node there can be several (two
torchrun jobs of two users, or of one user who started a second run by mistake). Weighed together,
rank 1 of one job and rank 1 of the other are one rank to the weighing, and the verdict blames a rank
of one job with the other's evidence (seen with two hung 2-rank jobs: "rank 0 is elsewhere" cited with
the other job's "rank 1 is elsewhere" line). So each job is collected alone, as `why --pid LAUNCHER`
would (its own stacks, output files, ended ranks and runtime files), within one share of the one
deadline, and weighed alone; the reports are shown one after the other, the strongest first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional

from rankscope.procs import Job, discover
from rankscope.why.report import CAUSE, NO_PROBLEM, NOTHING, PARTIAL

if TYPE_CHECKING:
    from rankscope.stacks.collect import Stop
    from rankscope.why.collect import Progress
    from rankscope.why.options import WhyOptions
    from rankscope.why.report import WhyReport
    from rankscope.why.signals import Gathered


@dataclass(frozen=True)
class JobTarget:
    """One job of the node, as `why --pid` names it."""

    name: str
    pids: tuple[int, ...]


def jobs_here() -> list[JobTarget]:
    """The node's jobs that have workers, each as its launcher's pid (or its workers' pids)."""
    return [target for target in map(_target, discover().jobs) if target is not None]


def _target(job: Job) -> Optional[JobTarget]:
    if not job.workers:
        return None
    if job.launcher_pid is not None:
        return JobTarget(f"{job.launcher} pid {job.launcher_pid}", (job.launcher_pid,))
    pids = tuple(sorted(w.pid for w in job.workers))
    return JobTarget(f"{job.launcher} (pids {', '.join(map(str, pids))})", pids)


def gather_each(
    targets: Sequence[JobTarget],
    options: WhyOptions,
    progress: Optional[Progress] = None,
    stop: Optional[Stop] = None,
) -> list[tuple[JobTarget, Gathered]]:
    """Each job collected alone; the one deadline shared: each job gets an equal part of what is left."""
    from rankscope.why.collect import gather_local

    deadline = time.monotonic() + options.timeout
    out = []
    for index, target in enumerate(targets):
        if stop is not None and stop.signum:
            break
        share = max(1.0, (deadline - time.monotonic()) / (len(targets) - index))
        gathered = gather_local(replace(options, pids=target.pids, timeout=share), progress, stop)
        out.append((target, gathered))
    return out


#: Which report comes first: a named cause, then partial evidence, then nothing wrong.
_RANK = {CAUSE: 0, PARTIAL: 1, NO_PROBLEM: 2, NOTHING: 3}


def strongest_first(reports: Sequence[tuple[JobTarget, WhyReport]]) -> list[tuple[JobTarget, WhyReport]]:
    return sorted(reports, key=lambda item: _RANK.get(item[1].outcome, 4))


def headline(targets: Sequence[JobTarget]) -> str:
    names = ", ".join(t.name for t in targets)
    return (
        f"{len(targets)} jobs on this node ({names}), each weighed apart, the strongest verdict first; "
        "one alone: rankscope why --pid LAUNCHER_PID"
    )
