"""A rank the kernel's OOM killer really kills: `why` reads its exit status and the kernel's own line.

The job's rank 1 is moved into a memory cgroup (cgroup v1's memory controller, as this machine has)
with a 96 MiB limit, then allocates 1 GiB: the kernel kills it and writes ``Memory cgroup out of
memory: Killed process PID (...)``. torchrun (``--monitor-interval 600``) has not reaped it, so its
exit status (SIGKILL) is still there beside dmesg's line. The cgroup is the test's own (its name
holds the test's pid) and is removed at the end; the job is stopped by its process group.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import torchrun_job
from tests.support.leftovers import wait_for

from rankscope import procfs
from rankscope.demo.launch import LaunchedJob

MEMCG = Path("/sys/fs/cgroup/memory")

JOB = """\
import os
import time
from pathlib import Path

import torch.distributed as dist


def build_cache(rank):
    go = Path(os.environ["RANKSCOPE_READY_DIR"], "go")
    while not go.exists():
        time.sleep(0.1)
    return bytearray(1 << 30)  # more than its cgroup allows: the OOM killer ends it


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    Path(os.environ["RANKSCOPE_READY_DIR"], f"ready.{rank}").touch()
    if rank == 1:
        build_cache(rank)
    dist.barrier()


main()
"""


@pytest.fixture(scope="module")
def oom_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LaunchedJob, int]]:
    if os.geteuid() != 0 or not os.access(MEMCG, os.W_OK):
        pytest.skip("needs root and cgroup v1's memory controller (/sys/fs/cgroup/memory)")
    workdir = tmp_path_factory.mktemp("oom")
    script = workdir / "oom_job.py"
    script.write_text(JOB)
    group = MEMCG / f"rankscope-test-oom-{os.getpid()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(96 << 20))
        with contextlib.suppress(OSError):  # where swap is accounted: no swapping past the limit
            (group / "memory.memsw.limit_in_bytes").write_text(str(96 << 20))
        with torchrun_job(workdir, script=script, torchrun_args=["--monitor-interval", "600"]) as job:
            victim = next(p for p in job.worker_pids() if procfs.environ(p).get("RANK") == "1")
            (group / "cgroup.procs").write_text(str(victim))
            (workdir / "go").touch()
            wait_for(
                lambda: (procfs.stat_fields(victim) or ["?"])[0] == "Z", what="the OOM killer to kill rank 1"
            )
            yield job, victim
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()


def test_a_rank_the_oom_killer_killed_is_named_with_the_kernels_line(
    oom_job: tuple[LaunchedJob, int],
) -> None:
    job, victim = oom_job
    result = run_cli("why", "--pid", str(job.pid), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    verdict = result.json()["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("oom_kill", [1]), verdict
    texts = {e["source"].split(",")[0]: e["text"] for e in verdict["evidence"]}
    assert f"Killed process {victim} " in texts["kernel messages"], texts
    assert texts[f"exit status (/proc/{victim}/stat)"].endswith("(sent by the kernel's OOM killer)"), texts
    assert verdict["text"] == "rank 1 was killed by the kernel's OOM killer", verdict
