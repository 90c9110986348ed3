"""The scheduler's own words in a job's output (pure): SLURM ending a job or a step.

slurmstepd writes them into the job's output (its stderr) in these forms:

    slurmstepd: error: *** JOB 2180718 ON gpu001 CANCELLED AT 2026-11-26T00:40:01 DUE TO TIME LIMIT ***
    slurmstepd: error: *** STEP 2180718.0 ON gpu001 CANCELLED AT 2026-11-26T00:40:01 ***
    slurmstepd: error: Detected 1 oom-kill event(s) in StepId=2180718.0. Some of your processes may
        have been killed by the cgroup out-of-memory handler.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rankscope.evidence import CULPRIT, Finding, Kind

_CANCELLED = re.compile(
    r"\*\*\* (?P<what>JOB|STEP) (?P<id>\S+) ON (?P<node>\S+) CANCELLED AT (?P<time>\S+)(?: DUE TO (?P<why>[A-Z ]+?))? \*\*\*"
)
_CGROUP_OOM = re.compile(r"Detected (?P<count>\d+) oom[-_]kill event\(s\) in (?:StepId=)?(?P<id>\S+?)\.? ")

_CAUSES = {
    "TIME LIMIT": "scheduler_time_limit",
    "PREEMPTION": "scheduler_preempted",
    "NODE FAILURE": "node_failure",
}


def scheduler_findings(lines: Iterable[tuple[str, int, str]]) -> list[Finding]:
    """Findings of (source, line number, text) lines: a job or step the scheduler cancelled (why,
    when given), and cgroup OOM kills."""
    out: list[Finding] = []
    for source, number, text in lines:
        cancelled = _CANCELLED.search(text)
        if cancelled is not None:
            why = (cancelled.group("why") or "").strip()
            cause = _CAUSES.get(why, "scheduler_cancelled")
            reason = f" due to {why.lower()}" if why else " (scancel, or a limit)"
            what = (
                f"SLURM cancelled {cancelled.group('what').lower()} {cancelled.group('id')} on "
                f"{cancelled.group('node')} at {cancelled.group('time')}{reason}"
            )
            out.append(Finding(Kind.LAUNCHER, cause, CULPRIT, cancelled.group("node"), what, None, source, number,
                               number, time=cancelled.group("time"),
                               next_step="sacct -j JOB --format=JobID,State,Elapsed,Timelimit,ExitCode"))  # fmt: skip
            continue
        oom = _CGROUP_OOM.search(text)
        if oom is not None:
            what = f"SLURM's cgroup out-of-memory handler killed processes of step {oom.group('id')}"
            out.append(Finding(Kind.KERNEL, "oom_kill", CULPRIT, None, what, None, source, number, number,
                               next_step="more memory per task (--mem, --mem-per-cpu) or less host memory per "
                               "rank; sacct -j JOB --format=JobID,MaxRSS,ReqMem"))  # fmt: skip
    return out
