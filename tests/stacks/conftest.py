"""Real hung torchrun jobs (gloo, CPU), one per scenario, shared by the tests of a module (lock_job: of a worker)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from tests.support.jobs import torchrun_job

from rankscope.demo.launch import LaunchedJob


@pytest.fixture(scope="session")
def lock_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    """Rank 2 deadlocks on its own lock; ranks 0,1,3 wait in all_reduce; 2 background threads per rank.

    Two files read it (test_real_jobs, with the real --native cases; test_jobs_by_evidence) and none
    changes it: one job per worker. Hung, it takes next to no CPU while it waits. Its collective timeout
    is an hour: a worker's session outlasts hang_job's default of 10 minutes, after which the job would end."""
    args = ("--scenario", "lock", "--culprit", "2", "--threads", "2", "--timeout", "3600")
    with torchrun_job(tmp_path_factory.mktemp("lock"), *args, nproc=4) as job:
        yield job


@pytest.fixture(scope="module")
def barrier_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    """Rank 1 never reaches the barrier (it loops in load_batch); ranks 0 and 2 wait there (two ranks with
    one Python stack: their native frames must not split it)."""
    args = ("--scenario", "skip-barrier", "--culprit", "1")
    with torchrun_job(tmp_path_factory.mktemp("skip"), *args, nproc=3) as job:
        yield job


@pytest.fixture(scope="module")
def deep_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    """Rank 1 is stuck deep in decode_record recursion; rank 0 reaches a barrier through another chain.
    Two ranks: the tests read the call chains, and one rank on each side shows both."""
    with torchrun_job(tmp_path_factory.mktemp("deep"), "--scenario", "deep", "--culprit", "1") as job:
        yield job


@pytest.fixture
def python_sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A plain Python process (no rank) that sleeps, killed after the test."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
