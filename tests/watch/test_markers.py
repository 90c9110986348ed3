"""How the watcher finds a rank's progress marker (rankscope.watch.collect.Watched.find_marker): under the
name the rank would give it, at every look; by listing the shared runtime directory, at most every
LIST_EVERY seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rankscope.inproc import runtime
from rankscope.watch import collect


def test_a_marker_is_found_under_its_name_at_once_and_by_listing_rarely(tmp_path: Path) -> None:
    for index in range(50):  # other processes' files in the shared directory
        (tmp_path / runtime.file_name("node1", 5000 + index, "progress", index)).touch()
    worker = collect.Watched(4242, 3, "node1", None, str(tmp_path), 0)
    assert worker.find_marker() is None
    named = tmp_path / runtime.file_name("node1", 4242, "progress", 3)
    named.touch()
    assert worker.find_marker() == str(named)  # its own name, looked at every time
    # A marker under another rank than the one its environment gave the watcher: found by a listing,
    # and the listing is not repeated before LIST_EVERY seconds have passed.
    other = collect.Watched(4343, 1, "node1", None, str(tmp_path), 0)
    assert other.find_marker() is None
    odd = tmp_path / runtime.file_name("node1", 4343, "progress", 7)
    odd.touch()
    assert other.find_marker() is None
    other.listed_at -= collect.LIST_EVERY
    assert other.find_marker() == str(odd)
    (tmp_path / runtime.file_name("node1", 4444, "progress", 2)).touch()  # a process of another host
    assert collect.Watched(4444, 2, "node2", None, str(tmp_path), 0).find_marker() is None


def _rank(code: str, directory: Path) -> subprocess.Popen[str]:
    """Rank 0 running ``code``, its runtime directory ``directory``, stdin and stdout piped."""
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, runtime.ENV_DIR: str(directory), "RANK": "0"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


WRITER = """
import sys, rankscope
sys.stdin.readline()
rankscope.progress(step=7)
print("written", flush=True)
sys.stdin.readline()
"""


def test_an_earlier_processs_marker_of_a_reused_pid_gives_way_to_the_ranks_own(tmp_path: Path) -> None:
    """A real rank (RANK=0) whose pid an earlier process of rank 3 had, and whose marker file that
    process left (it was killed): the listing finds that one first; once the rank writes its own, the
    watcher reads the rank's own, not the earlier one forever."""
    from rankscope.inproc import progress as progress_file
    from rankscope.ranks import short_hostname

    host = short_hostname()
    here, earlier = tmp_path / "run", tmp_path / "earlier"
    here.mkdir(mode=0o700)
    earlier.mkdir(mode=0o700)
    env = {**os.environ, runtime.ENV_DIR: str(earlier), "RANK": "3"}
    code = "import os, rankscope; rankscope.progress(step=1); os._exit(0)"  # killed: its file stays
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    (left,) = earlier.iterdir()
    rank = _rank(WRITER, here)
    try:
        left.rename(here / runtime.file_name(host, rank.pid, "progress", 3))  # the reused pid's old file
        worker = collect.Watched(rank.pid, 0, host, None, str(here), progress_file.start_ticks(rank.pid))
        assert worker.sample().step is None  # found by listing, refused: another process's
        assert rank.stdin is not None and rank.stdout is not None
        rank.stdin.write("\n")
        rank.stdin.flush()
        assert rank.stdout.readline() == "written\n"
        assert worker.sample().step == 7
    finally:
        rank.kill()
        rank.wait()


ENDING = """
import atexit, sys
atexit.register(sys.stdin.readline)  # registered first, runs last: a teardown that takes its time
import rankscope
rankscope.progress(step=7)
print("written", flush=True)
sys.stdin.readline()
"""


def test_a_rank_whose_marker_its_normal_exit_removed_is_ending_not_stalled(tmp_path: Path) -> None:
    """A real rank that exits normally: its atexit handler removes its marker, then the interpreter
    takes its time (torch's teardown on a loaded machine took over 2 s in CI and the watcher called it
    a stall, then killed the job). The watcher samples it as ending; with every rank ending, no stall."""
    import time

    from rankscope.inproc import progress as progress_file
    from rankscope.ranks import short_hostname
    from rankscope.watch.decide import Decider
    from rankscope.watch.model import Snapshot

    host = short_hostname()
    here = tmp_path / "run"
    here.mkdir(mode=0o700)
    rank = _rank(ENDING, here)
    try:
        assert rank.stdin is not None and rank.stdout is not None
        assert rank.stdout.readline() == "written\n"
        worker = collect.Watched(rank.pid, 0, host, None, str(here), progress_file.start_ticks(rank.pid))
        first = worker.sample()
        assert (first.step, first.ending) == (7, False)
        decider = Decider(stall=2, straggler_steps=0)
        assert decider.decide(Snapshot(0.0, (first,))) == []
        rank.stdin.write("\n")  # exit: the marker goes, then the last handler waits
        rank.stdin.flush()
        deadline = time.monotonic() + 60
        while list(here.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rank.poll() is None  # still there, in its teardown
        later = worker.sample()
        assert later.ending and later.calls is None
        assert worker.sample().ending  # and stays so
        assert decider.decide(Snapshot(10.0, (later,))) == []  # quiet for 10 s, but ending: no stall
        rank.stdin.write("\n")
        rank.stdin.flush()
        assert rank.wait(60) == 0
    finally:
        rank.kill()
        rank.wait()
