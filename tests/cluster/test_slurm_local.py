"""On one node, the processes of one SLURM job (what `stacks --jobid` and `why --jobid` dump there): a
`rankscope watch` that runs inside the job carries the job's variables too, and is never one of them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.leftovers import wait_for

from rankscope.cluster.slurm_local import slurm_job_pids
from rankscope.errors import NothingFoundError

JOB = "rs-test-4411"
RANKSCOPE = str(Path(sys.executable).with_name("rankscope"))


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _start(procs: list[subprocess.Popen[bytes]], argv: list[str]) -> int:
    env = {**os.environ, "SLURM_JOB_ID": JOB, "SLURM_PROCID": "0"}
    proc = subprocess.Popen(
        argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    procs.append(proc)
    return proc.pid


def test_a_watcher_inside_the_job_is_not_one_of_its_processes(started: list[subprocess.Popen[bytes]]) -> None:
    rank = _start(started, [sys.executable, "-c", "import time; time.sleep(300)"])
    watcher = _start(
        started, [RANKSCOPE, "watch", "--pid", str(rank), "--stall", "600", "--out", "/dev/null/x"]
    )
    wait_for(lambda: b"python" in Path(f"/proc/{rank}/cmdline").read_bytes(), 30, "the rank")
    wait_for(lambda: b"watch" in Path(f"/proc/{watcher}/cmdline").read_bytes(), 30, "the watcher")
    assert slurm_job_pids(JOB) == [rank]


def test_a_job_with_no_process_here_is_said_so() -> None:
    with pytest.raises(NothingFoundError, match="no Python process of SLURM job rs-test-none on this node"):
        slurm_job_pids("rs-test-none")
