"""A full runtime directory never ends the job (measured before: `rankscope.progress()` exited 135,
SIGBUS, at its first store into a mapped page the file system had no room for).

A real tmpfs of 256 KiB, mounted for the test (under the machine-wide lock, unmounted in teardown)
and filled to the last block before the job starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.machine_lock import machine_lock

from rankscope.inproc import runtime

JOB = """
import rankscope, rankscope.inproc.handler as handler
for step in range(1000):
    rankscope.progress(step=step, phase="train")
print("steps done", handler.enabled(), rankscope.progress.__self__.path, flush=True)
"""


@pytest.fixture
def full_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    with machine_lock("mount"):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(mount)], check=True)
    try:
        (mount / "rt").mkdir(mode=0o700)
        filler = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(filler, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(filler)
        yield mount
    finally:
        with machine_lock("mount"):
            subprocess.run(["umount", str(mount)], check=True)


def test_progress_and_handler_on_a_full_file_system_leave_the_job_running(full_tmpfs: Path) -> None:
    env = {**os.environ, runtime.ENV_DIR: str(full_tmpfs / "rt"), "RANKSCOPE_INPROC": "1"}
    out = subprocess.run([sys.executable, "-c", JOB], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # Both switched themselves off: no marker path, no handler; nothing half-made left behind.
    assert out.stdout.split() == ["steps", "done", "False", "None"]
    assert out.stderr == ""
    assert os.listdir(full_tmpfs / "rt") == []
