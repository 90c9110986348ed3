"""gpu-test killed while its torchrun job runs: no torchrun or worker left, no temporary directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.leftovers import carrying, kill_marked, marked_env, wait_for, wait_gone

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_gpu_test_killed_mid_run_leaves_no_torchrun_worker_or_directory(tmp_path: Path, sig: int) -> None:
    pytest.importorskip("torch.distributed")
    env, mark = marked_env(TMPDIR=str(tmp_path), OMP_NUM_THREADS="1", RANKSCOPE_GPUTEST_HANG_DEVICE="1")
    for name in [k for k in env if k.endswith("_SOCKET_IFNAME") or k == "MASTER_ADDR"]:
        del env[name]
    rankscope = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rankscope",
            "gpu-test",
            "--nproc",
            "2",
            "--backend",
            "gloo",
            "--timeout",
            "120",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        # torchrun and both workers are up (each a session leader of its own)
        wait_for(lambda: len(carrying(mark, skip=(rankscope.pid,))) >= 3, 180, "torchrun and its 2 workers")
        assert list(tmp_path.glob("rankscope-gputest-*"))
        os.kill(rankscope.pid, sig)
        rankscope.wait(60)
        assert wait_gone(mark, timeout=20) == [], "left running after gpu-test died"
        wait_for(lambda: not list(tmp_path.glob("rankscope-gputest-*")), 10, "the directory to be removed")
        if sig == signal.SIGTERM:
            assert rankscope.returncode == 143
    finally:
        kill_marked(mark)
        if rankscope.poll() is None:
            os.killpg(rankscope.pid, signal.SIGKILL)
        rankscope.wait()
