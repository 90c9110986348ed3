"""Jobs started by other launchers than torchrun, found and named with no target given."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.sshd import free_port

from rankscope.demo.launch import start_torchrun

pytestmark = pytest.mark.slow


def test_accelerate_launch_job_is_found_and_named(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    assert accelerate, "accelerate is in requirements/test.txt"
    # accelerate's multi-process launcher (torch elastic inside `accelerate launch`); hang_job uses gloo.
    launcher = [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    launcher += ["--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    job = start_torchrun(
        nproc=2, script_args=["--scenario", "lock", "--culprit", "1"], workdir=tmp_path, launcher=launcher
    )
    try:
        job.wait_ready(timeout=180)
        result = run_cli("stacks", "--json")  # no target: discovery must find the accelerate job
        # Other jobs running on this machine (other tests) may be found too: only this one is checked.
        assert result.returncode in (0, 4), result.stderr
        doc = result.json()
        (found,) = [j for j in doc["jobs"] if j["launcher_pid"] == job.pid]
        assert found["launcher"] == "accelerate"
        mine = [p for p in doc["processes"] if p["pid"] in job.worker_pids()]
        assert [p["rank"]["rank"] for p in mine] == [0, 1]
        assert {p["rank"]["launcher"] for p in mine} == {"accelerate"}
        # The job's own diagnosis is in jobs[] when several jobs were found, else the report's.
        assert (found.get("diagnosis") or doc["diagnosis"])["divergent_ranks"] == [1]
        whoami = run_cli("whoami", "--pid", str(job.worker_pids()[1]), "--json").json()
        assert whoami["launcher"] == "accelerate" and whoami["world_size"] == 2
    finally:
        job.stop()
