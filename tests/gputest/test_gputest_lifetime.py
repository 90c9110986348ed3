"""gpu-test killed while its torchrun job runs: no torchrun or worker left, no temporary directory."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from tests.support.leftovers import carrying, rankscope_marked, wait_for, wait_gone

pytestmark = pytest.mark.slow


def _interface_variable(name: str) -> bool:
    return name.endswith("_SOCKET_IFNAME") or name == "MASTER_ADDR"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_gpu_test_killed_mid_run_leaves_no_torchrun_worker_or_directory(tmp_path: Path, sig: int) -> None:
    pytest.importorskip("torch.distributed")
    argv = ["gpu-test", "--nproc", "2", "--backend", "gloo", "--timeout", "120"]
    extra = {"TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1", "RANKSCOPE_GPUTEST_HANG_DEVICE": "1"}
    with rankscope_marked(*argv, drop=_interface_variable, **extra) as (rankscope, mark):
        # torchrun and both workers are up (each a session leader of its own)
        wait_for(lambda: len(carrying(mark, skip=(rankscope.pid,))) >= 3, 180, "torchrun and its 2 workers")
        assert list(tmp_path.glob("rankscope-gputest-*"))
        os.kill(rankscope.pid, sig)
        rankscope.wait(60)
        assert wait_gone(mark, timeout=20) == [], "left running after gpu-test died"
        wait_for(lambda: not list(tmp_path.glob("rankscope-gputest-*")), 10, "the directory to be removed")
        if sig == signal.SIGTERM:
            assert rankscope.returncode == 143
