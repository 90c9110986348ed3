"""`why`'s GPU signal when none of the job's ranks is a Python process any more (the moment a watcher's
death capture runs: the workers ended, the launcher has not yet): the node's GPUs are still read, since
their ECC errors and processes matter most then. On an H100 the capture of a rank that died of a
device-side assert said "no NVML or nvidia-smi here" though NVML answered a second earlier.

No GPU exists here: an `nvidia-smi` on PATH prints what `nvidia-smi -q -x` printed on an H100 node
(tests/data/gpu-h100/nvidia-smi-q.xml). The launcher is a real torchrun whose one worker is `sleep`
(``--no-python``): a job with no Python worker, as a job whose workers all ended looks."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli

DATA = Path(__file__).parents[1] / "data" / "gpu-h100"


@pytest.fixture
def launcher_without_python_workers(tmp_path: Path) -> Iterator[int]:
    pytest.importorskip("torch.distributed")
    job = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
         "--no-python", "sleep", "300"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        children = Path(f"/proc/{job.pid}/task/{job.pid}/children")
        while not children.read_text().split():
            assert job.poll() is None and time.monotonic() < deadline, "torchrun did not start its worker"
            time.sleep(0.2)
        yield job.pid
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def test_the_gpus_are_read_for_a_job_whose_workers_are_gone(
    launcher_without_python_workers: int, tmp_path: Path
) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ncat {DATA / 'nvidia-smi-q.xml'}\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{smi.parent}:{os.environ['PATH']}"}
    result = run_cli("why", "--pid", str(launcher_without_python_workers), "--json", env=env)
    document = json.loads(result.stdout)
    signals = {s["name"]: s for s in document["signals"]}
    assert signals["GPU"]["state"] == "read", signals["GPU"]
    assert signals["GPU"]["detail"] == "1 GPUs (nvidia-smi)"
    assert document["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert signals["stacks"]["detail"] == (
        f"no worker left to dump: torchrun pid {launcher_without_python_workers} runs without any"
    ), signals["stacks"]
