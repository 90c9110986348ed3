"""`rankscope exec --jobid` inside a real SLURM allocation (srun --overlap into a fully allocated job)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.multinode_job import REMOTE_RANKSCOPE
from tests.support.slurm import SlurmCluster


@pytest.fixture
def sleeping_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[str]:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    # Every CPU of the node is taken: attaching only works with --overlap.
    jobid = slurm_cluster.sbatch(script, "-N1", "-n1", "-c2", f"--output={tmp_path}/slurm-%j.out")
    try:
        slurm_cluster.wait_state(jobid)
        yield jobid
    finally:
        slurm_cluster.run("scancel", jobid, check=False)


def test_exec_over_srun_in_a_running_job(
    slurm_cluster: SlurmCluster, sleeping_job: str, tmp_path: Path
) -> None:
    result = run_cli(
        "exec",
        "--jobid",
        sleeping_job,
        "--out",
        str(tmp_path / "out"),
        "--",
        "echo on $SLURMD_NODENAME",
        env=slurm_cluster.env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "localhost (1)" in result.stdout
    assert "on localhost" in result.stdout
    assert (tmp_path / "out" / "localhost.out").read_text() == "on localhost\n"


def test_exec_over_srun_keeps_exit_codes(slurm_cluster: SlurmCluster, sleeping_job: str) -> None:
    result = run_cli("exec", "--jobid", sleeping_job, "--", "echo x; exit 7", env=slurm_cluster.env)
    assert result.returncode == 5, result.stdout + result.stderr
    assert "localhost (1) exit 7" in result.stdout
    assert "localhost  command failed: exit 7" in result.stdout


def test_unknown_jobid_is_one_line(slurm_cluster: SlurmCluster) -> None:
    result = run_cli("exec", "--jobid", "999999", "--", "date", env=slurm_cluster.env)
    assert result.returncode == 3
    assert result.stderr.startswith("rankscope: error: SLURM job 999999 not found")
    assert len(result.stderr.strip().splitlines()) == 1
    result = run_cli("exec", "--jobid", "12;rm -rf /", "--", "date", env=slurm_cluster.env)
    assert result.returncode == 8 and "not a SLURM job id" in result.stderr


def test_missing_engines_are_one_line_with_exit_6(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    for args, tool in (
        (["--jobid", "12"], "squeue"),
        (["--hosts", "n1", "--via", "pdsh"], "pdsh"),
        (["--hosts", "n1", "--via", "ssh"], "ssh"),
    ):
        result = run_cli("exec", *args, "--", "date", env=env)
        assert result.returncode == 6, result.stderr
        assert result.stderr.startswith(f"rankscope: error: {tool} not found on PATH")
    result = run_cli("exec", "--hosts", "n1", "--via", "srun", "--", "date", env=env)
    assert result.returncode == 8 and "--via srun needs --jobid" in result.stderr


def test_stacks_jobid_without_python_is_no_job_found(slurm_cluster: SlurmCluster, sleeping_job: str) -> None:
    result = run_cli(
        "stacks", "--jobid", sleeping_job, "--remote-rankscope", str(REMOTE_RANKSCOPE), env=slurm_cluster.env
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "localhost [no job found]" in result.stdout
    result = run_cli(
        "stacks",
        "--jobid",
        sleeping_job,
        "--remote-rankscope",
        "/nonexistent/rankscope",
        env=slurm_cluster.env,
    )
    assert result.returncode == 5, result.stdout + result.stderr
    assert "localhost [no rankscope there]" in result.stdout
