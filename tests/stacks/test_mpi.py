"""Rank identity and job discovery on real Open MPI processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.system import ensure_commands

from rankscope.demo.launch import kill_tree
from rankscope.procs import ProcessTable, find_jobs

pytestmark = [pytest.mark.slow, pytest.mark.needs("openmpi")]

SLEEPER = (
    "import os, pathlib, time; "
    "pathlib.Path(os.environ['READY'], os.environ['OMPI_COMM_WORLD_RANK']).touch(); time.sleep(300)"
)


def stop(proc: subprocess.Popen[bytes]) -> None:
    # Open MPI's ranks are not in mpirun's process group: kill the whole tree.
    kill_tree(proc, grace=2.0)


def start_mpirun(ready: Path, nproc: int) -> subprocess.Popen[bytes]:
    """`mpirun -np N python <sleeper>`, returned once every rank has started."""
    ensure_commands({"mpirun": "openmpi-bin"})
    ready.mkdir(exist_ok=True)
    env = dict(os.environ, READY=str(ready), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.Popen(
        ["mpirun", "--oversubscribe", "-np", str(nproc), sys.executable, "-c", SLEEPER],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while len(list(ready.iterdir())) < nproc:
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            pytest.fail("Open MPI ranks did not start")
        time.sleep(0.1)
    return proc


def test_mpirun_ranks(tmp_path: Path) -> None:
    proc = start_mpirun(tmp_path, 3)
    try:
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
        stop(proc)


def test_several_jobs_each_get_a_section(tmp_path: Path) -> None:
    first = start_mpirun(tmp_path / "a", 2)
    try:
        second = start_mpirun(tmp_path / "b", 2)
        try:
            result = run_cli("stacks")
            # Other jobs of this machine may be found too: only these two are checked.
            assert result.returncode in (0, 4), result.stdout + result.stderr
            for launcher in (first, second):
                assert (
                    f"── mpirun pid {launcher.pid}: ranks 0-1, world size 2, 2 of 2 processes dumped ──"
                    in (result.stdout)
                )
            doc = run_cli("stacks", "--pid", str(first.pid), "--pid", str(second.pid), "--json").json()
            jobs = {j["launcher_pid"]: j for j in doc["jobs"]}
            assert set(jobs) == {first.pid, second.pid}
            for job in jobs.values():
                assert len(job["pids"]) == 2
                assert job["diagnosis"]["findings"][0]["text"].startswith("all 2 ranks (ranks 0-1) ")
        finally:
            stop(second)
    finally:
        stop(first)
