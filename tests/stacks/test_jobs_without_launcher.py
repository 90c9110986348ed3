"""Jobs with no launcher and no RANK variable, each a real 3-rank gloo job whose rank 1 sleeps in its own
code while ranks 0 and 2 wait in all_reduce:

- ``torch.multiprocessing.spawn``, the way the DDP tutorials start one (tests/stacks/mp_spawn_job.py): the
  parent stands for its ranks, numbered by start order; a spawn Pool of plain Python processes is no job;
- a script that runs itself again per local rank, the way PyTorch Lightning's DDP does
  (tests/stacks/relaunch_job.py): the parent is local rank 0, the children say theirs in LOCAL_RANK.
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

from rankscope.procs import MP_SPAWN, RELAUNCH, ProcessTable, discover, workers_of

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("mp_spawn_job.py")
RELAUNCH_JOB = Path(__file__).with_name("relaunch_job.py")


def _start(*args: str, script: Path = JOB, ready: Path | None = None) -> subprocess.Popen[bytes]:
    """The job script; with ``ready``, its ranks touch ``ready.<rank>`` there right before they hang."""
    env = dict(os.environ)
    if ready is not None:
        env["RANKSCOPE_READY_DIR"] = str(ready)
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _children(pid: int, count: int, what: str) -> None:
    deadline = time.monotonic() + 180  # torch's import on a loaded machine
    while len(ProcessTable().children.get(pid, [])) < count:
        assert time.monotonic() < deadline, f"the {what} never started"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def spawn_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    pytest.importorskip("torch.distributed")
    ready = tmp_path_factory.mktemp("spawn-ready")
    proc = _start(str(free_port()), "3", "1", ready=ready)
    try:
        _children(proc.pid, 4, "ranks")  # 3 and multiprocessing's resource tracker
        yield proc.pid, ready
    finally:
        _stop(proc)


def _hung_text(parent: int, launcher: str, ready: Path) -> str:
    """``stacks --pid PARENT`` once ranks 0 and 2 sit in all_reduce (seconds after torch's import);
    every process a rank of ``launcher``, 0-2."""
    deadline = time.monotonic() + 180  # torch's import on a loaded machine
    while len(list(ready.glob("ready.*"))) < 3:  # a look at a directory, not a dump of every rank
        assert time.monotonic() < deadline, (
            f"ranks never got their process group up: {sorted(ready.iterdir())}"
        )
        time.sleep(0.1)
    deadline = time.monotonic() + 120
    while True:
        document = run_cli("stacks", "--pid", str(parent), "--json").json()
        if str(document).count("'all_reduce'") >= 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert sorted(p["rank"]["rank"] for p in document["processes"]) == [0, 1, 2]
    assert {p["rank"]["launcher"] for p in document["processes"]} == {launcher}
    text = run_cli("stacks", "--pid", str(parent))
    assert text.returncode == 0, text.stderr
    assert f"{launcher} pid {parent}" in text.stdout
    return text.stdout


def test_the_parent_stands_for_its_ranks_numbered_by_start(spawn_job: tuple[int, Path]) -> None:
    parent, ready = spawn_job
    out = _hung_text(parent, MP_SPAWN, ready)
    assert "ranks 0,2 wait in all_reduce (torch.distributed) called from rank_main (mp_spawn_job.py:" in out
    assert "rank 1 is elsewhere: stay_here (mp_spawn_job.py:" in out


def test_discovery_finds_the_job_without_a_target(spawn_job: tuple[int, Path]) -> None:
    (job,) = [j for j in discover(ProcessTable()).jobs if j.launcher_pid == spawn_job[0]]
    assert job.launcher == MP_SPAWN and [w.rank.rank for w in job.workers] == [0, 1, 2]
    assert all(w.rank.world_size == 3 for w in job.workers)


def test_a_spawned_rank_named_alone_is_its_parent_s_job(spawn_job: tuple[int, Path]) -> None:
    """`--pid` of one of the spawned children (what `ps` or a watcher shows): its rank comes from its
    parent's job, the others with it (it has no rank variable of its own)."""
    table = ProcessTable()
    kids = table.spawned_ranks(spawn_job[0])
    job = workers_of(kids[1], table)
    assert job.launcher == MP_SPAWN and job.launcher_pid == spawn_job[0]
    assert [(w.pid, w.rank.rank) for w in job.workers] == [(pid, rank) for rank, pid in enumerate(kids)]


def test_a_spawn_pool_without_torch_is_no_job() -> None:
    proc = _start("plain")
    try:
        _children(proc.pid, 3, "pool")  # 2 and multiprocessing's resource tracker
        table = ProcessTable()
        assert table.spawned_ranks(proc.pid) == []
        assert not [j for j in discover(table).jobs if j.launcher_pid == proc.pid]
    finally:
        _stop(proc)


def test_a_script_that_runs_itself_per_local_rank_is_one_job_with_the_parent_as_rank_0(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch.distributed")
    proc = _start(str(free_port()), "3", "1", script=RELAUNCH_JOB, ready=tmp_path)
    try:
        _children(proc.pid, 2, "local ranks 1-2")
        out = _hung_text(proc.pid, RELAUNCH, tmp_path)
        assert "ranks 0,2 wait in all_reduce (torch.distributed) called from main (relaunch_job.py:" in out
        assert "rank 1 is elsewhere: stay_here (relaunch_job.py:" in out
        (job,) = [j for j in discover(ProcessTable()).jobs if j.launcher_pid == proc.pid]
        assert [(w.rank.rank, w.rank.local_rank) for w in job.workers] == [(0, 0), (1, 1), (2, 2)]
        assert (
            job.workers[0].pid == proc.pid and job.key.master == "127.0.0.1:" + job.key.master.split(":")[-1]
        )
    finally:
        _stop(proc)
