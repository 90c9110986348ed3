"""ensure_running on a real process: what rankscope stopped it continues, what someone else stopped it leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from rankscope.stacks.pstate import ensure_running, proc_state


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "120"])
    yield proc
    proc.kill()
    proc.wait()


def _state_becomes(pid: int, states: tuple[str, ...]) -> str:
    """Poll until the kernel shows one of ``states`` (signals are delivered asynchronously)."""
    deadline = time.monotonic() + 30
    while (state := proc_state(pid)[0]) not in states and time.monotonic() < deadline:
        time.sleep(0.01)
    return state


def test_a_process_stopped_after_rankscope_looked_is_continued(sleeper: subprocess.Popen[bytes]) -> None:
    state_before = _state_becomes(sleeper.pid, ("S", "R"))
    os.kill(sleeper.pid, signal.SIGSTOP)  # what a py-spy killed mid-dump can leave behind
    assert _state_becomes(sleeper.pid, ("T",)) == "T"
    assert proc_state(sleeper.pid) == ("T", 0)
    assert ensure_running(sleeper.pid, state_before) is True
    assert _state_becomes(sleeper.pid, ("S", "R")) in ("S", "R")
    assert ensure_running(sleeper.pid, state_before) is False  # running: nothing to do


def test_a_process_someone_else_stopped_stays_stopped(sleeper: subprocess.Popen[bytes]) -> None:
    os.kill(sleeper.pid, signal.SIGSTOP)
    state_before = _state_becomes(sleeper.pid, ("T",))
    assert ensure_running(sleeper.pid, state_before) is False
    assert proc_state(sleeper.pid)[0] == "T"


def test_a_gone_process_needs_nothing() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert proc_state(proc.pid) == ("", 0)
    assert ensure_running(proc.pid, "S") is False
