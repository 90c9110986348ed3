"""The suite's teardown signals a pid it read from a file only while that pid is still the process
that wrote the file: a pid file outlives its process, and pids wrap (32768 here)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.leftovers import kill_recorded, started_before


def test_the_process_that_wrote_its_pid_file_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "sleeper.pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    sleeper = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "the pid file never appeared"
            time.sleep(0.02)
        kill_recorded(pid_file)
        assert sleeper.wait(30) == -9
    finally:
        if sleeper.poll() is None:
            os.killpg(sleeper.pid, 9)
        sleeper.wait()


def test_a_process_started_after_the_pid_file_was_written_is_left_alone(tmp_path: Path) -> None:
    """The file's number now belongs to a newer process (as after a wrap): it is not signalled."""
    newer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        pid_file = tmp_path / "stale.pid"
        pid_file.write_text(str(newer.pid))
        an_hour_ago = time.time() - 3600
        os.utime(pid_file, (an_hour_ago, an_hour_ago))
        assert not started_before(newer.pid, an_hour_ago)
        kill_recorded(pid_file)
        time.sleep(0.2)
        assert newer.poll() is None, "a process newer than the pid file was killed"
    finally:
        os.killpg(newer.pid, 9)
        newer.wait()


def test_missing_or_garbage_pid_files_are_ignored(tmp_path: Path) -> None:
    kill_recorded(tmp_path / "absent.pid")
    (tmp_path / "garbage.pid").write_text("not a pid")
    kill_recorded(tmp_path / "garbage.pid")
    assert not started_before(2**22 + 1, time.time())
