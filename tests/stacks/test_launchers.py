"""Jobs started by other launchers than torchrun, found and named with no target given."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import torchrun_job
from tests.support.sshd import free_port

pytestmark = pytest.mark.slow


def test_accelerate_launch_job_is_found_and_named(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    assert accelerate, "accelerate is in requirements/test.txt"
    # accelerate's multi-process launcher (torch elastic inside `accelerate launch`); hang_job uses gloo.
    launcher = [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    launcher += ["--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    with torchrun_job(tmp_path, "--scenario", "lock", "--culprit", "1", launcher=launcher) as job:
        result = run_cli("stacks", "--json")  # no target: discovery must find the accelerate job
        # Other tests' jobs may run on this node too (exit 4 when one of theirs fails): check only ours.
        assert result.returncode in (0, 4), result.stderr
        doc = result.json()
        (found,) = [j for j in doc["jobs"] if j["launcher_pid"] == job.pid]
        assert found["launcher"] == "accelerate"
        own = [p for p in doc["processes"] if p["pid"] in found["pids"]]
        assert [p["rank"]["rank"] for p in own] == [0, 1] and all(p["dumped"] for p in own)
        assert {p["rank"]["launcher"] for p in own} == {"accelerate"}
        diagnosis = found.get("diagnosis") or doc["diagnosis"]  # its own when the node has several jobs
        assert diagnosis["divergent_ranks"] == [1]
        whoami = run_cli("whoami", "--pid", str(job.worker_pids()[1]), "--json").json()
        assert whoami["launcher"] == "accelerate" and whoami["world_size"] == 2
