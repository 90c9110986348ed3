"""Real `srun --label` output, and `rankscope prefix` under srun, on the single-node SLURM
cluster fixture (tests/support/slurm.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

RANKSCOPE = str(Path(sys.executable).with_name("rankscope"))
CRASH = (
    "import os\n"
    "r = int(os.environ['SLURM_PROCID'])\n"
    "print(f'task {r} starting', flush=True)\n"
    "def load(r):\n"
    "    raise FileNotFoundError(f'/data/shard-{r:05d}.bin')\n"
    "if r == 1:\n"
    "    raise MemoryError('host memory exhausted')\n"
    "load(r)\n"
)


def test_real_srun_label_log(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    result = slurm_cluster.run(
        "srun", "--label", "-n", "4", "--overcommit", sys.executable, "-c", CRASH, timeout=120, check=False
    )
    log = tmp_path / "srun.log"
    log.write_text(result.stdout + result.stderr)
    assert "1: MemoryError: host memory exhausted" in log.read_text(), log.read_text()
    data = run_cli("logs", "errors", str(log), "--json").json()
    assert [(g["exception_type"], g["ranks"]) for g in data["groups"]] == [
        ("FileNotFoundError", "0,2-3"),
        ("MemoryError", "1"),
    ]
    assert data["groups"][0]["normalised_message"] == "/data/shard-<n>.bin"
    lines = run_cli("logs", "grep", "--rank", "2", str(log)).stdout.splitlines()
    assert lines[0] == "task 2 starting"
    assert lines[-1] == "FileNotFoundError: /data/shard-00002.bin"


def test_prefix_under_srun(slurm_cluster: SlurmCluster) -> None:
    result = slurm_cluster.run(
        "srun",
        "-n",
        "3",
        "--overcommit",
        RANKSCOPE,
        "prefix",
        "--",
        sys.executable,
        "-c",
        "import os; print('hi from', os.environ['SLURM_PROCID'])",
        timeout=120,
    )
    assert sorted(result.stdout.splitlines()) == [f"[localhost:{r}] hi from {r}" for r in range(3)]
