"""The one-thread command runner and the start-up prefetch of `rankscope stacks`, on real processes."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from tests.support.cli import run_cli

from rankscope.demo.launch import LaunchedJob
from rankscope.ranks import rank_of_pid
from rankscope.stacks import prefetch
from rankscope.stacks.collect import Target, collect
from rankscope.stacks.local import StacksOptions, run_local
from rankscope.stacks.pstate import proc_state
from rankscope.stacks.pyspy_cmd import find_pyspy
from rankscope.stacks.runner import Runner

PY = sys.executable


def _children(name: str) -> list[int]:
    """This process's children whose executable is ``name`` (running or not yet reaped)."""
    me = str(os.getpid())
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                ppid = handle.read().rsplit(")", 1)[1].split()[1]
            if ppid == me and os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith(name):
                found.append(int(pid))
        except (OSError, IndexError):
            continue
    return found


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def _clean_prefetch() -> Iterator[None]:
    yield
    prefetch.release()


def test_runner_captures_large_outputs_of_many_commands_at_once() -> None:
    fds = _open_fds()
    runner = Runner(dict(os.environ))
    big = "import sys; sys.stdout.write('x' * 300000); sys.stderr.write('e' * 100000); sys.exit({})"
    runs = [runner.spawn([PY, "-c", big.format(code)], timeout=60) for code in range(6)]
    ended = runner.finish_all()
    assert sorted(ended, key=runs.index) == runs
    for code, run in enumerate(runs):
        assert run.returncode == code and not run.timed_out
        assert run.stdout == b"x" * 300000 and run.stderr == b"e" * 100000
    assert _open_fds() == fds
    assert not any(os.path.exists(f"/proc/{run.child}") for run in runs)  # all reaped


def test_runner_kills_a_command_at_its_deadline() -> None:
    runner = Runner(dict(os.environ))
    slow = runner.spawn([PY, "-c", "import time; print('started', flush=True); time.sleep(60)"], timeout=1.0)
    quick = runner.spawn([PY, "-c", "print('done')"], timeout=30)
    ended = runner.finish_all()
    assert set(ended) == {slow, quick}
    assert quick.returncode == 0 and quick.stdout == b"done\n"
    assert slow.timed_out and slow.returncode == -9
    assert slow.stdout == b"started\n"  # what it wrote before the deadline is kept
    assert 0.9 < slow.seconds < 30


def test_runner_spawn_of_a_missing_program_raises_and_leaks_nothing() -> None:
    fds = _open_fds()
    runner = Runner(dict(os.environ))
    with pytest.raises(OSError):
        runner.spawn(["/nonexistent/py-spy", "dump"], timeout=5)
    assert runner.running == [] and _open_fds() == fds


@pytest.mark.slow
def test_guess_matches_discovery_for_a_launcher_and_for_no_target(lock_job: LaunchedJob) -> None:
    assert prefetch.guess_pids([lock_job.pid]) == lock_job.worker_pids()
    assert prefetch.guess_pids([lock_job.worker_pids()[1]]) == [lock_job.worker_pids()[1]]
    assert prefetch.guess_pids([]) == lock_job.worker_pids()


@pytest.mark.slow
def test_prefetched_dumps_are_adopted(lock_job: LaunchedJob) -> None:
    assert prefetch.start([lock_job.pid], False, False, 10.0) == 4
    result = run_local(StacksOptions(pids=(lock_job.pid,)))
    assert [o.prefetched for _, o in result.outcomes] == [True] * 4
    assert all(o.snapshot is not None for _, o in result.outcomes)
    assert result.report.processes and all(p.dumped for p in result.report.processes)
    assert prefetch.handover() == (None, {})
    assert all(proc_state(pid)[0] in ("S", "R") for pid in lock_job.worker_pids())


@pytest.mark.slow
def test_a_wrong_guess_is_not_used_and_leaves_its_target_running(lock_job: LaunchedJob) -> None:
    first, second = lock_job.worker_pids()[:2]
    # Guessed: `--native` dumps of `first`. Collected: a plain dump of `second` only.
    assert prefetch.start([first], True, False, 10.0) == 1
    targets = [Target(second, rank_of_pid(second))]
    (outcome,) = collect(targets, find_pyspy())
    assert outcome.snapshot is not None and not outcome.prefetched
    assert _children("py-spy") == []  # the unused prefetched dump was reaped
    assert proc_state(first)[0] in ("S", "R")


@pytest.mark.slow
def test_cli_reports_the_same_with_prefetch_off(lock_job: LaunchedJob) -> None:
    env = dict(os.environ, RANKSCOPE_PREFETCH="0")
    plain = run_cli("stacks", "--pid", str(lock_job.pid), "--json", env=env).json()
    early = run_cli("stacks", "--pid", str(lock_job.pid), "--json").json()
    assert plain["diagnosis"] == early["diagnosis"]
    assert plain["diagnosis"]["divergent_ranks"] == [2]
