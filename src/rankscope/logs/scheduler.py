"""SLURM's own words in a job's output (pure): slurmstepd ending a job or a step, its cgroup OOM kills,
srun's node failures and the steps it could not start.

slurmstepd writes them into the job's output (its stderr) in these forms:

    slurmstepd: error: *** JOB 2180718 ON gpu001 CANCELLED AT 2026-11-26T00:40:01 DUE TO TIME LIMIT ***
    slurmstepd: error: *** STEP 2180718.0 ON gpu001 CANCELLED AT 2026-11-26T00:40:01 ***
    slurmstepd: error: Detected 1 oom-kill event(s) in StepId=2180718.0. Some of your processes may
        have been killed by the cgroup out-of-memory handler.

and srun's ``srun: error: Node failure on gpu-b07`` (a culprit, as a cancel due to a node failure)
and ``srun: error: Unable to create step for job 7712301: Memory required by task is not available``
(no task ran: ``step_not_created``).

A job or step cancelled with a reason (time limit, preemption, a node failure) is a culprit: the
scheduler ended it. Without one it is scancel, or srun ending the step after a task failed (srun's
own ``task N: ...`` line names that task): a victim. The job's line and its step's say the same
thing, so a reader keeps one per job and cause (:func:`dedupe_key`).
"""

from __future__ import annotations

import re
from typing import Optional

from rankscope.evidence import CULPRIT, VICTIM, Finding, Kind

_CANCELLED = re.compile(
    r"\*\*\* (?P<what>JOB|STEP) (?P<id>\S+) ON (?P<node>\S+) CANCELLED AT (?P<time>\S+)(?: DUE TO (?P<why>[A-Z ]+?))? \*\*\*"
)
#: srun's own words: a node of the step failed; a step SLURM would not start.
_NODE_FAILURE = re.compile(r"srun: error: Node failure on (?P<node>\S+)")
_NO_STEP = re.compile(r"srun: error: Unable to create step for job (?P<id>\S+?):? (?P<why>.+)$")
NO_STEP_STEP = (
    "the step asked for what the allocation cannot give it (memory, GPUs, tasks, cores): compare the "
    "srun line's --mem, --gres and --ntasks with `scontrol show job JOB`; `step creation temporarily "
    "disabled` means an earlier step still holds them"
)
_CGROUP_OOM = re.compile(
    r"Detected (?P<count>\d+) oom[-_]kill event(?:\(s\))? in (?:StepId=|step )?(?P<id>[^\s.]+(?:\.\w+)?)"
)

#: A cancel's reason -> the cause id and what to do.
_CAUSES = {
    "TIME LIMIT": (
        "scheduler_time_limit",
        "raise the job's --time, or checkpoint more often; a hang that ran into the limit shows in "
        "`rankscope watch` captures (`rankscope launch --watch` adds the `#SBATCH --signal` that takes "
        "one before the limit)",
    ),
    "PREEMPTION": ("scheduler_preempted", "requeue or resume from a checkpoint"),
    "NODE FAILURE": (
        "node_failure",
        "`sinfo -R` and `scontrol show node` name the node and the reason; `rankscope doctor` on it",
    ),
}
#: The cause of SLURM's cgroup out-of-memory kills (its line, and srun's ``task N: Out Of Memory``).
OOM_KILL = "oom_kill"
OOM_STEP = (
    "host memory, not GPU memory: `sacct -j JOB --format=JobID,MaxRSS,ReqMem` shows how much each step "
    "used; raise --mem (or --mem-per-cpu), or lower the data loader's workers and prefetch"
)


def scheduler_finding(text: str, source: str, line: int, order: int) -> Optional[Finding]:
    """The finding of one slurmstepd line; None for any other line."""
    cancelled = _CANCELLED.search(text)
    if cancelled is not None:
        why = (cancelled.group("why") or "").strip()
        cause, step = _CAUSES.get(why, ("scheduler_cancelled", ""))
        reason = (
            f" due to {why.lower()}" if why else " (scancel, or srun ending the step after a task failed)"
        )
        what = (
            f"SLURM cancelled {cancelled.group('what').lower()} {cancelled.group('id')} on "
            f"{cancelled.group('node')} at {cancelled.group('time')}{reason}"
        )
        role = CULPRIT if why in _CAUSES else VICTIM
        return Finding(Kind.LAUNCHER, cause, role, None, what, None, source, line, order,
                       time=cancelled.group("time"),
                       next_step=step or "sacct -j JOB --format=JobID,State,Elapsed,Timelimit,ExitCode")  # fmt: skip
    failed = _NODE_FAILURE.search(text)
    if failed is not None:
        cause, step = _CAUSES["NODE FAILURE"]
        what = f"SLURM: node {failed.group('node')} failed (srun's Node failure): the step's tasks there died with it"
        return Finding(Kind.LAUNCHER, cause, CULPRIT, None, what, None, source, line, order, next_step=step)
    refused = _NO_STEP.search(text)
    if refused is not None:
        what = f"SLURM did not start the step of job {refused.group('id')}: {refused.group('why').strip()}"
        return Finding(
            Kind.LAUNCHER,
            "step_not_created",
            CULPRIT,
            None,
            what,
            None,
            source,
            line,
            order,
            next_step=NO_STEP_STEP,
        )
    oom = _CGROUP_OOM.search(text)
    if oom is not None:
        what = f"SLURM's cgroup out-of-memory handler killed processes of step {oom.group('id')}"
        return Finding(
            Kind.KERNEL, OOM_KILL, CULPRIT, None, what, None, source, line, order, next_step=OOM_STEP
        )
    return None


def dedupe_key(finding: Finding) -> tuple[str, str]:
    """(cause, job id) of a cancel finding: the job's line and its step's are one finding."""
    found = re.search(r"(?:job|step) (\S+?)(?:\.\S+)? on ", finding.what)
    return finding.cause, found.group(1) if found else finding.what
