"""A suspected stall confirmed by stacks: py-spy's non-blocking samples, and the in-process handler's
for a rank py-spy cannot sample."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.leftovers import wait_for

from rankscope.inproc import runtime
from rankscope.watch.confirm import confirm_stall, sample_inproc, without_current_thread

SLEEPER = """
import time
def parked_here():
    print("up", flush=True)
    time.sleep(60)
parked_here()
"""


@pytest.fixture
def parked(tmp_path: Path) -> Iterator[int]:
    env = {**os.environ, "RANKSCOPE_INPROC": "1", runtime.ENV_DIR: str(tmp_path / "rt")}
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEPER], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        # "up" comes one line before the sleep: on a loaded machine a first sample can still see it.
        wait_for(lambda: "nanosleep" in Path(f"/proc/{proc.pid}/wchan").read_text(), 30, "the sleep")
        yield proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_parked_process_is_confirmed_by_py_spy(parked: int) -> None:
    check = confirm_stall([parked], gap=0.1)
    assert check.stalled is True and check.text == "1 rank(s) unchanged over 0.1 s"
    assert check.busy is False  # asleep: no CPU between the samples


def test_main_thread_cpu_counts_what_the_main_thread_used(parked: int) -> None:
    from rankscope.watch.confirm import main_thread_cpu

    mine = main_thread_cpu(os.getpid())
    assert mine is not None and mine > 0
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    after = main_thread_cpu(os.getpid())
    assert after is not None and after - mine >= 0.1
    assert main_thread_cpu(parked) is not None and main_thread_cpu(2**22 + 1) is None


def test_the_handler_answers_where_py_spy_is_not_used(parked: int) -> None:
    first, second = sample_inproc([parked]), sample_inproc([parked])
    assert first == second and "in parked_here" in first[parked]
    assert "Current thread" not in first[parked]  # the handler's own thread is left out


def test_without_current_thread() -> None:
    text = 'Thread 0x1 (most recent call first):\n  File "a.py", line 1 in f\n\nCurrent thread 0x2 (most recent call first):\n  File "h.py", line 9 in serve\n'
    assert without_current_thread(text) == 'Thread 0x1 (most recent call first):\n  File "a.py", line 1 in f'
