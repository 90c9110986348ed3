"""`rankscope stacks --jobid J` against a hung torchrun job submitted with sbatch to a real SLURM cluster."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.cli import CliResult, run_cli
from tests.support.multinode_job import REMOTE_RANKSCOPE
from tests.support.slurm import SlurmCluster

from rankscope.demo.launch import HANG_JOB


@dataclass
class SlurmJob:
    jobid: str
    workdir: Path


@pytest.fixture(scope="module")
def hung_slurm_job(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SlurmJob]:
    workdir = tmp_path_factory.mktemp("sbatch")
    script = workdir / "train.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"export RANKSCOPE_READY_DIR={workdir} OMP_NUM_THREADS=1\n"
        f"exec {sys.executable} -m torch.distributed.run --standalone --nproc-per-node 2 {HANG_JOB}"
        " --scenario lock --culprit 1\n"
    )
    # -c2 takes every CPU of the node: rankscope must attach with srun --overlap.
    jobid = slurm_cluster.sbatch(script, "-N1", "-n1", "-c2", f"--output={workdir}/slurm-%j.out")
    try:
        slurm_cluster.wait_state(jobid, "RUNNING")
        deadline = time.monotonic() + 180
        while len(list(workdir.glob("ready.*"))) < 2:
            if time.monotonic() > deadline or slurm_cluster.job_state(jobid) != "RUNNING":
                log = (workdir / f"slurm-{jobid}.out").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"job {jobid} did not hang as planned: {log}")
            time.sleep(0.2)
        time.sleep(0.5)
        yield SlurmJob(jobid, workdir)
    finally:
        slurm_cluster.run("scancel", jobid, check=False)


@dataclass
class JobidRun:
    """One `stacks --jobid J --json --out DIR` run: its result and DIR (report.txt holds the text report)."""

    result: CliResult
    out: Path


@pytest.fixture(scope="module")
def jobid_run(
    slurm_cluster: SlurmCluster, hung_slurm_job: SlurmJob, tmp_path_factory: pytest.TempPathFactory
) -> JobidRun:
    """The text report (report.txt) and the JSON (stdout) of one run: each run is an srun step on the node."""
    out = tmp_path_factory.mktemp("jobid") / "out"
    result = run_cli(
        "stacks", "--jobid", hung_slurm_job.jobid, "--json", "--remote-rankscope", str(REMOTE_RANKSCOPE),
        "--out", str(out), env=slurm_cluster.env, timeout=180,
    )  # fmt: skip
    return JobidRun(result, out)


@pytest.mark.slow
def test_stacks_jobid_diagnoses_the_hung_sbatch_job(hung_slurm_job: SlurmJob, jobid_run: JobidRun) -> None:
    result = jobid_run.result
    assert result.returncode == 0, result.stdout + result.stderr
    out = (jobid_run.out / "report.txt").read_text()
    assert f"SLURM job {hung_slurm_job.jobid}, 1 of 1 nodes (localhost)" in out
    assert "2 of 2 processes dumped" in out
    assert "rank 1" in out
    assert "Failed" not in out
    assert (jobid_run.out / "localhost.out").exists()


@pytest.mark.slow
def test_stacks_jobid_json(jobid_run: JobidRun) -> None:
    result = jobid_run.result
    assert result.returncode == 0, result.stdout + result.stderr
    document = result.json()
    assert sorted((p["rank"]["host"], p["rank"]["rank"]) for p in document["processes"]) == [
        ("localhost", 0), ("localhost", 1),
    ]  # fmt: skip
    assert document["diagnosis"]["divergent_ranks"] == [1]
