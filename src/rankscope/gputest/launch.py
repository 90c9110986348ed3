"""`gpu-test --nproc` / `--isolate` and `bench allreduce --nproc`: start rankscope under torchrun on this node.

torchrun starts its workers in their own sessions; on a deadline, Ctrl-C, SIGTERM or rankscope's
death the whole tree is ended, the workers found by the token they inherit (rankscope.lifetime).
Rank 0 writes its summary to a file named in the environment, so the launcher's exit code is the
test's verdict and not torchrun's.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rankscope import lifetime
from rankscope.gputest.isolate import IsolateVerdict, Subset, plan_stages, read_results, skip_known_bad
from rankscope.gputest.rank import DEVICES_ENV, VERDICT_ENV
from rankscope.gputest.report import Summary
from rankscope.serial import load_document

#: Seconds a local run may take beyond the test's own timeout: interpreter and torch start-up.
START_SLACK = 60.0


@dataclass
class LocalRun:
    returncode: Optional[int]
    summary: Optional[Summary]
    timed_out: bool = False
    output: str = ""


def run_local(
    nproc: int,
    rankscope_args: Sequence[str],
    timeout: float,
    env: Optional[Mapping[str, str]] = None,
    capture: bool = False,
) -> LocalRun:
    """``torchrun --standalone --nproc-per-node N -m rankscope ARGS``; ``capture``: keep the ranks' output.

    torchrun, its workers (each a session leader) and the private directory that holds the verdict
    and the ranks' log end with rankscope: at the deadline, on Ctrl-C, on SIGTERM (exit 143), and
    through the guardian when rankscope is killed (rankscope.lifetime).
    """
    job_env = dict(os.environ if env is None else env)
    job_env.setdefault("OMP_NUM_THREADS", "1")
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "rankscope",
        *rankscope_args,
    ]
    with lifetime.private_tempdir("rankscope-gputest-") as workdir, lifetime.sigterm_raises():
        verdict = Path(workdir) / "verdict.json"
        job_env[VERDICT_ENV] = str(verdict)
        log_path = Path(workdir) / "ranks.log"
        with open(log_path, "wb") as log:
            child = lifetime.start(
                argv,
                timeout + START_SLACK,
                env=job_env,
                capture=None,
                grace=3.0,
                stdout=log if capture else None,
                stderr=subprocess.STDOUT if capture else None,
            )
        with child:
            lifetime.wait([child])
        summary = None
        with contextlib.suppress(OSError, ValueError):
            summary = load_document(Summary, json.loads(verdict.read_text()))
        text = log_path.read_text(errors="replace") if capture else ""
    return LocalRun(child.returncode, summary, child.timed_out, text)


@dataclass
class SubsetRun:
    stage: str
    devices: Subset
    passed: bool
    detail: str


@dataclass
class Isolation:
    runs: list[SubsetRun] = field(default_factory=list)
    verdict: IsolateVerdict = field(default_factory=IsolateVerdict)


def subset_env(devices: Subset, on_gpu: bool, env: Mapping[str, str]) -> dict[str, str]:
    """The environment of one subset's run: CUDA_VISIBLE_DEVICES on a GPU node, slots on CPU."""
    run_env = dict(env)
    listed = ",".join(map(str, devices))
    run_env[DEVICES_ENV] = listed
    if on_gpu:
        run_env["CUDA_VISIBLE_DEVICES"] = listed
    return run_env


def _detail(run: LocalRun, devices: Subset) -> str:
    """What went wrong in one subset's run, by device (local rank r ran on ``devices[r]``)."""
    if run.summary is None:
        return "no verdict (timed out)" if run.timed_out else f"no verdict (exit {run.returncode})"
    if run.summary.passed:
        return "OK"

    def device(rank: int) -> str:
        return str(devices[rank]) if rank < len(devices) else f"rank {rank}"

    parts = [f"device {device(r.rank)} failed at {r.step}" for r in run.summary.failed]
    silent = run.summary.never_joined + run.summary.no_result
    if silent:
        parts.append(f"devices {','.join(device(r) for r in silent)} silent")
    return "; ".join(parts)


def isolate(
    devices: Sequence[int],
    rankscope_args: Sequence[str],
    timeout: float,
    on_gpu: bool,
    progress: Optional[Callable[[SubsetRun], None]] = None,
) -> Isolation:
    """Each device alone, then pairs, then halves; subsets with a device already bad alone are skipped."""
    result = Isolation()
    outcomes: dict[Subset, bool] = {}
    for stage, subsets in plan_stages(devices):
        bad = [s[0] for s, ok in outcomes.items() if len(s) == 1 and not ok]
        for subset in skip_known_bad(subsets, bad):
            run = run_local(
                len(subset), rankscope_args, timeout, subset_env(subset, on_gpu, os.environ), True
            )
            passed = run.summary is not None and run.summary.passed
            outcomes[subset] = passed
            done = SubsetRun(stage, subset, passed, _detail(run, subset))
            result.runs.append(done)
            if progress is not None:
                progress(done)
    result.verdict = read_results(outcomes)
    return result
