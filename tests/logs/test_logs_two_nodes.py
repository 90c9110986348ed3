"""Two torchrun "nodes" (two agents on this machine, static rendezvous, --role nodeA:/nodeB:)
writing one interleaved console log, as `srun ... torchrun --role $(hostname -s): --tee 3` does.

torchrun's prefix is ``[${role_name}${local_rank}]:``: with --role the number is the local rank."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli

from rankscope.demo.launch import LaunchedJob

JOB = Path(__file__).parent / "jobs" / "crash_job.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_errors_fold_global_ranks_over_two_hosts(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    jobs: list[LaunchedJob] = []
    with open(log, "wb") as out:
        try:
            for node_rank, name in enumerate(["nodeA", "nodeB"]):
                argv = [
                    sys.executable, "-m", "torch.distributed.run",
                    "--nnodes", "2", "--node-rank", str(node_rank), "--nproc-per-node", "4",
                    "--master-addr", "127.0.0.1", "--master-port", str(port),
                    "--role", f"{name}:", "--tee", "3",
                    str(JOB), "--odd-rank", "5",
                ]  # fmt: skip
                process = subprocess.Popen(
                    argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
                jobs.append(LaunchedJob(process=process, workdir=tmp_path, nproc=4, log_path=log))
            codes = [job.process.wait(240) for job in jobs]
        finally:
            for job in jobs:
                job.stop()
    assert all(code != 0 for code in codes), log.read_text(errors="replace")[-3000:]
    data = run_cli("logs", "errors", str(log), "--json").json()
    groups = [(g["exception_type"], g["ranks"], g["hosts"]) for g in data["groups"]]
    # torchrun's --role prefix carries the LOCAL rank: global rank 5 is nodeB's local rank 1
    assert groups == [
        ("ValueError", "nodeA:[0-3] nodeB:[0,2-3]", "nodeA,nodeB"),
        ("RuntimeError", "nodeB:1", "nodeB"),
    ]
    # torch's own [rankN]: marker on the traceback lines gives the global ranks back
    assert [g["global_ranks"] for g in data["groups"]] == ["0-4,6-7", "5"]
    text = run_cli("logs", "errors", str(log)).stdout
    assert "error 2 of 2 — culprit, 1 rank(s): nodeB:1 (torch global ranks 5)" in text
    ranks = run_cli("logs", "ranks", str(log), "--json").json()
    assert [r["label"] for r in ranks["ranks"]] == [f"node{n}:{r}" for n in "AB" for r in range(4)]
