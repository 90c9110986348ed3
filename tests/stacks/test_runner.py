"""The one-thread command runner of `rankscope stacks` (rankscope.stacks.runner), on real processes."""

from __future__ import annotations

import os
import sys
import time

import pytest

from rankscope import lifetime
from rankscope.stacks.runner import Runner

PY = sys.executable


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_runner_captures_large_outputs_of_many_commands_at_once() -> None:
    lifetime.guardian()  # started once per process, its pipe held for good: not a leak
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
    assert time.monotonic() >= slow.deadline  # not killed before its deadline
    assert set(ended) == {slow, quick}
    assert quick.returncode == 0 and quick.stdout == b"done\n"
    # Killed (SIGKILL, marked timed out) rather than left to sleep out its 60 s.
    assert slow.timed_out and slow.returncode == -9
    assert slow.stdout == b"started\n"  # what it wrote before the deadline is kept


def test_runner_spawn_of_a_missing_program_raises_and_leaks_nothing() -> None:
    fds = _open_fds()
    runner = Runner(dict(os.environ))
    with pytest.raises(OSError):
        runner.spawn(["/nonexistent/py-spy", "dump"], timeout=5)
    assert runner.running == [] and _open_fds() == fds
