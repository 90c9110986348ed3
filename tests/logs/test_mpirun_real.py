"""A real Open MPI job (`mpirun -np 3`, no `--tag-output`) whose rank 1 raises: its traceback has no
rank prefix, and `logs errors` names it after mpirun's report of the first process that exited with
an error code (`Process name: [[JOB,1],1]`, `Exit code: 1`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.system import ensure_commands

from rankscope.demo.launch import kill_tree

pytestmark = [pytest.mark.slow, pytest.mark.needs("openmpi")]

#: Only rank 1 writes: under PYTHONUNBUFFERED=1 another rank's `print` is two writes, and its line's
#: end can land after the traceback's header (`step 10Traceback ...`), a paste this test is not about.
RANK = """\
import os, time
if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
    batch = {}
    batch["input_ids"]
time.sleep(2)
"""


def test_the_traceback_of_a_real_mpirun_job_is_the_rank_mpirun_reports(tmp_path: Path) -> None:
    ensure_commands({"mpirun": "openmpi-bin"})
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        job = subprocess.Popen(
            ["mpirun", "--oversubscribe", "-np", "3", sys.executable, "-c", RANK],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        assert job.wait(120) != 0, log.read_text()
    finally:
        kill_tree(job, grace=2.0)  # Open MPI's ranks are not in mpirun's process group
    text = log.read_text()
    assert "Process name: [[" in text, text  # mpirun's report, as this version prints it
    first = run_cli("logs", "errors", str(log)).stdout.splitlines()[0]
    assert first.startswith(
        "root cause: rank 1 (the one process its launcher reports failed): KeyError: 'input_ids'"
    ), text
