"""`rankscope why --jobid J` against a torchrun job submitted with sbatch to the real single-node SLURM
cluster of tests/support/slurm.py.

Rank 1 raises while a thread of its own keeps its process alive; rank 0 waits in a barrier for ever.
The job's output goes through a pipe (as ``| tee`` makes it), so no rank's stdout or stderr is a file:
only SLURM's StdOut (``scontrol show job``) holds the traceback, and `why` finds it there.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.multinode_job import REMOTE_RANKSCOPE
from tests.support.slurm import SlurmCluster

from rankscope.demo.launch import HANG_JOB

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crashed_slurm_job(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """(the job id, its StdOut file) once both ranks are in place and rank 1's traceback is written."""
    pytest.importorskip("torch.distributed")
    workdir = tmp_path_factory.mktemp("sbatch-why")
    script = workdir / "train.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"export RANKSCOPE_READY_DIR={workdir} OMP_NUM_THREADS=1\n"
        f"{sys.executable} -m torch.distributed.run --standalone --nproc-per-node 2 {HANG_JOB}"
        " --scenario crash-hang --culprit 1 2>&1 | cat\n"
    )
    jobid = slurm_cluster.sbatch(script, "-N1", "-n1", "-c2", f"--output={workdir}/slurm-%j.out")
    output = workdir / f"slurm-{jobid}.out"
    try:
        slurm_cluster.wait_state(jobid, "RUNNING")
        deadline = time.monotonic() + 180
        while len(list(workdir.glob("ready.*"))) < 2 or b"RuntimeError: bad batch" not in output.read_bytes():
            if time.monotonic() > deadline or slurm_cluster.job_state(jobid) != "RUNNING":
                log = output.read_text(errors="replace")[-2000:] if output.exists() else ""
                raise RuntimeError(f"job {jobid} did not hang as planned: {log}")
            time.sleep(0.2)
        yield jobid, output
    finally:
        slurm_cluster.run("scancel", jobid, check=False)


def test_why_jobid_reads_slurms_stdout_and_names_the_rank_that_raised(
    slurm_cluster: SlurmCluster, crashed_slurm_job: tuple[str, Path]
) -> None:
    jobid, output = crashed_slurm_job
    result = run_cli(
        "why", "--jobid", jobid, "--json", "--remote-rankscope", str(REMOTE_RANKSCOPE),
        env=slurm_cluster.env, timeout=180,
    )  # fmt: skip
    assert result.returncode == 15, result.stdout + result.stderr
    document = result.json()
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("python_exception", [1])
    first = verdict["evidence"][0]
    # the node's finding, in SLURM's StdOut (from scontrol: no rank's stdout or stderr is a file)
    assert first["source"].startswith(f"localhost: {output}:"), first
    assert "RuntimeError: bad batch on rank 1" in first["text"]
    assert f"localhost:{output}" in document["logs"]
    states = {s["ranks"]: s["state"] for s in document["ranks"]}
    assert states["0"].startswith("waits in barrier"), states
