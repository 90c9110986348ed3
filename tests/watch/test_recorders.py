"""The watcher's reading of the ranks' ``fr_status`` answers (rankscope.watch.recorders): the pure
parts, and a real in-process handler in a process without torch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.leftovers import wait_for

from rankscope.inproc import runtime
from rankscope.inproc.progress import start_ticks
from rankscope.ranks import short_hostname
from rankscope.watch.collect import Watched
from rankscope.watch.recorders import MAX_PERIOD, RecorderLooks, cadence, progress_number


def test_a_ranks_number_sums_its_groups_and_none_when_it_names_none() -> None:
    assert progress_number({"groups": {"0": [12, 11], "1": [3, -1]}, "problem": None}) == 25
    assert progress_number({"groups": {}, "problem": "torch.distributed is not imported"}) is None
    assert progress_number({"groups": {"0": ["x", True]}}) is None  # garbage is no number
    assert progress_number("garbage") is None


def test_the_recorders_are_read_a_quarter_of_the_stall_apart_within_bounds() -> None:
    assert cadence(60, 1) == MAX_PERIOD
    assert cadence(20, 1) == 5
    assert cadence(2, 1) == 1  # never more often than the looks


@pytest.fixture
def handler_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A plain Python process (no torch) running the in-process handler."""
    directory = tmp_path / "rt"
    env = {**os.environ, "RANKSCOPE_INPROC": "1", runtime.ENV_DIR: str(directory)}
    code = "import time; print('up', flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        yield proc, directory
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _reading_its_fifo(pid: int) -> bool:
    """Whether a thread of ``pid`` waits in a FIFO's open or read (the handler's request thread)."""
    try:
        return any(
            Path(f"/proc/{pid}/task/{tid}/wchan").read_text()
            in ("pipe_read", "anon_pipe_read", "fifo_open", "wait_for_partner")
            for tid in os.listdir(f"/proc/{pid}/task")
        )
    except OSError:
        return False


def test_a_rank_without_a_process_group_answers_but_has_no_number_and_late_replies_are_removed(
    handler_process: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, directory = handler_process
    worker = Watched(proc.pid, 0, short_hostname(), os.getuid(), str(directory), start_ticks(proc.pid))
    looks = RecorderLooks(period=0.0)
    assert looks.look(0.0, [worker]) == ()
    assert looks.answering  # the job is not one with nothing to watch: its recorder may come
    # Stopped only once its request thread waits on its FIFO again (stopped between answering and
    # reopening, no reader holds the FIFO: the ask is refused at once, not left late).
    for _ in range(20):  # a rank stopped between its answer and its next read refuses the ask: again
        wait_for(lambda: _reading_its_fifo(proc.pid), 30, "the handler's next read")
        os.kill(proc.pid, signal.SIGSTOP)  # its handler cannot answer before the ask's deadline
        try:
            if looks.look(1.0, [worker]) == () and len(looks.late) == 1:
                break
        finally:
            os.kill(proc.pid, signal.SIGCONT)
    assert len(looks.late) == 1
    wait_for(lambda: list(directory.glob("*.reply")), 30, "the late reply")
    looks.look(2.0, [worker])
    assert looks.late == [] and list(directory.glob("*.reply")) == []  # read and removed
