"""Rank identity and job discovery on real Open MPI processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.system import ensure_commands

from rankscope.procs import ProcessTable, find_jobs

pytestmark = pytest.mark.slow

SLEEPER = "import os, pathlib, time; pathlib.Path(os.environ['READY'], os.environ['OMPI_COMM_WORLD_RANK']).touch(); time.sleep(300)"


def test_mpirun_ranks(tmp_path: Path) -> None:
    ensure_commands({"mpirun": "openmpi-bin"})
    env = dict(
        os.environ, READY=str(tmp_path), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"
    )
    proc = subprocess.Popen(
        ["mpirun", "--oversubscribe", "-np", "3", sys.executable, "-c", SLEEPER],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.iterdir())) < 3:
            assert proc.poll() is None, "mpirun exited early"
            assert time.monotonic() < deadline, "Open MPI ranks did not start"
            time.sleep(0.1)
        (job,) = [j for j in find_jobs(ProcessTable()) if j.launcher_pid == proc.pid]
        assert job.launcher == "mpirun"
        assert [(w.rank.rank, w.rank.world_size, w.rank.launcher) for w in job.workers] == [
            (0, 3, "mpirun"),
            (1, 3, "mpirun"),
            (2, 3, "mpirun"),
        ]
        doc = run_cli("stacks", "--pid", str(proc.pid), "--json").json()
        assert doc["diagnosis"]["findings"][0]["text"].startswith("all 3 ranks (ranks 0-2) ")
        assert doc["jobs"][0]["launcher"] == "mpirun"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
