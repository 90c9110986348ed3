"""`rankscope demo`: a real 4-rank torchrun job with one deadlocked rank, diagnosed end to end."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rankscope.demo.launch import start_torchrun
from rankscope.errors import ExitCode, RankscopeError
from rankscope.folding import RankSet
from rankscope.stacks.local import run_local
from rankscope.stacks.options import StacksOptions
from rankscope.stacks.report import Diagnosis, StacksReport


@dataclass(frozen=True)
class DemoOptions:
    """What `rankscope demo` starts: ``nproc`` ranks, one of which (``culprit``) hangs as ``scenario`` says."""

    nproc: int = 4
    culprit: int = 2
    scenario: str = "lock"
    #: Diagnose with native frames too.
    native: bool = False


@dataclass
class DemoResult:
    report: StacksReport
    diagnosis: Diagnosis
    culprit: int
    launcher_pid: int

    @property
    def named_culprit(self) -> bool:
        return self.diagnosis.divergent_ranks == [self.culprit]

    @property
    def named(self) -> str:
        """The ranks the diagnosis named, in words: ``rank 1``, ``ranks 0-1``, ``no rank``."""
        return (
            RankSet.of(self.diagnosis.divergent_ranks).phrase()
            if self.diagnosis.divergent_ranks
            else "no rank"
        )


def require_torch() -> None:
    """torch is importable here (found, not imported: the ranks import it, rankscope has no use for it)."""
    try:
        found = importlib.util.find_spec("torch") is not None
    except ImportError:
        found = False
    if not found:
        raise RankscopeError(
            "the demo needs PyTorch and it is not installed in this environment",
            "pip install torch (the CPU build is enough; see the README's first command)",
            ExitCode.MISSING_TOOL,
        )


def run_demo(options: DemoOptions, say: Callable[[str], None] = lambda _: None) -> DemoResult:
    """Start the job, wait for it to hang, diagnose it, stop it; ``say`` hears what happens."""
    require_torch()
    nproc, culprit, scenario = options.nproc, options.culprit, options.scenario
    workdir = Path(tempfile.mkdtemp(prefix="rankscope-demo-"))
    say(
        f"starting a {nproc}-rank torchrun job (gloo, CPU) in which rank {culprit} deadlocks ({scenario}) ..."
    )
    job = start_torchrun(
        nproc=nproc,
        script_args=["--scenario", scenario, "--culprit", str(culprit)],
        workdir=workdir,
        python=sys.executable,
    )
    try:
        job.wait_ready(timeout=180)
        say(
            f"job is hung (launcher pid {job.pid}, workers {', '.join(map(str, job.worker_pids()))}); diagnosing ..."
        )
        result = run_local(StacksOptions(pids=(job.pid,), native=options.native, samples=2, interval=0.5))
        assert result.report.diagnosis is not None  # run_local diagnoses the report it returns
        return DemoResult(result.report, result.report.diagnosis, culprit, job.pid)
    finally:
        job.stop()
        shutil.rmtree(workdir, ignore_errors=True)  # the job's log and ready files: nothing is left behind
        say("job stopped and cleaned up.")
