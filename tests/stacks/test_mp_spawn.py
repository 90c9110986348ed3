"""`torch.multiprocessing.spawn` jobs (no launcher, no rank variable): a real 3-rank gloo job started the
way the DDP tutorials start one (tests/stacks/mp_spawn_job.py), whose rank 1 sleeps in its own code while
ranks 0 and 2 wait in all_reduce. The parent stands for its ranks, numbered by start order; a spawn Pool
of plain Python processes is no job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.sshd import free_port

from rankscope.procs import MP_SPAWN, ProcessTable, discover

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("mp_spawn_job.py")


def _start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(JOB), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _children(pid: int, count: int, what: str) -> None:
    deadline = time.monotonic() + 180  # torch's import on a loaded machine
    while len(ProcessTable().children.get(pid, [])) < count + 1:  # + multiprocessing's resource tracker
        assert time.monotonic() < deadline, f"the {what} never started"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def spawn_job() -> Iterator[int]:
    pytest.importorskip("torch.distributed")
    proc = _start(str(free_port()), "3", "1")
    try:
        _children(proc.pid, 3, "ranks")
        yield proc.pid
    finally:
        _stop(proc)


def test_the_parent_stands_for_its_ranks_numbered_by_start(spawn_job: int) -> None:
    deadline = time.monotonic() + 120
    while True:  # until ranks 0 and 2 sit in all_reduce (the group forms seconds after torch's import)
        document = run_cli("stacks", "--pid", str(spawn_job), "--json").json()
        if "all_reduce" in str(document) or time.monotonic() > deadline:
            break
        time.sleep(1)
    labels = sorted(p["rank"]["rank"] for p in document["processes"])
    assert labels == [0, 1, 2]
    assert {p["rank"]["launcher"] for p in document["processes"]} == {MP_SPAWN}
    text = run_cli("stacks", "--pid", str(spawn_job))
    assert text.returncode == 0, text.stderr
    assert f"mp.spawn pid {spawn_job}" in text.stdout
    assert (
        "ranks 0,2 wait in all_reduce (torch.distributed) called from rank_main (mp_spawn_job.py:"
        in text.stdout
    )
    assert "rank 1 is elsewhere: stay_here (mp_spawn_job.py:" in text.stdout


def test_discovery_finds_the_job_without_a_target(spawn_job: int) -> None:
    (job,) = [j for j in discover(ProcessTable()).jobs if j.launcher_pid == spawn_job]
    assert job.launcher == MP_SPAWN and [w.rank.rank for w in job.workers] == [0, 1, 2]
    assert all(w.rank.world_size == 3 for w in job.workers)


def test_a_spawn_pool_without_torch_is_no_job() -> None:
    proc = _start("plain")
    try:
        _children(proc.pid, 2, "pool")
        table = ProcessTable()
        assert table.spawned_ranks(proc.pid) == []
        assert not [j for j in discover(table).jobs if j.launcher_pid == proc.pid]
    finally:
        _stop(proc)
