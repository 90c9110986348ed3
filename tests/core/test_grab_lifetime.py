"""`core grab` killed mid-grab: no gcore or gdb left, the target running and untraced, no core
readable by others at any moment, nothing partial left in --dir."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core.conftest import hung_process
from tests.support.leftovers import (
    kill_marked,
    marked_env,
    rankscope_marked,
    state,
    tracer,
    wait_for,
    wait_gone,
)

pytestmark = pytest.mark.needs("gdb")

#: A process with 300 MB of touched memory, so that gcore takes a while to write it.
BIG = """
import time
memory = bytearray(300 << 20)
for i in range(0, len(memory), 4096):
    memory[i] = 1
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def big(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    with hung_process(tmp_path, BIG, "big.py") as proc:
        yield proc


def _files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_rankscope_killed_mid_grab_leaves_nothing_running_traced_or_readable(
    big: subprocess.Popen[bytes], tmp_path: Path, sig: int
) -> None:
    out = tmp_path / "cores"
    with rankscope_marked("core", "grab", str(big.pid), "--dir", str(out)) as (rankscope, mark):
        # gcore has the target and has begun writing: every byte so far is private
        wait_for(lambda: tracer(big.pid) != 0 and _files(out), 120, "gcore to start writing the core")
        for path in [out, *out.rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            assert mode & 0o077 == 0, f"{path} is {oct(mode)} while being written"
        assert not list(out.glob("core.*")), "a core in --dir before it is whole"
        os.kill(rankscope.pid, sig)  # rankscope alone, as `kill PID` would
        rankscope.wait(30)
        assert wait_gone(mark) == [], "left running after rankscope died"
        wait_for(lambda: tracer(big.pid) == 0, 10, "the target to be untraced")
        assert state(big.pid) not in ("T", "t")
        assert big.poll() is None
        wait_for(lambda: not list(out.iterdir()), 10, "the partial core to be removed")
        if sig != signal.SIGKILL:
            assert rankscope.returncode == 128 + sig
            assert rankscope.stderr is not None
            assert (b"terminated" if sig == signal.SIGTERM else b"interrupted") in rankscope.stderr.read()


def test_a_finished_core_is_private_and_nothing_else_is_left(
    big: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    out = tmp_path / "cores"
    env, mark = marked_env()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "rankscope", "core", "grab", str(big.pid), "--dir", str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert [p.name for p in out.iterdir()] == [f"core.{big.pid}"]  # the private directory is gone
        assert stat.S_IMODE((out / f"core.{big.pid}").stat().st_mode) == 0o600
        assert wait_gone(mark) == []
        assert state(big.pid) == "S" and tracer(big.pid) == 0
    finally:
        kill_marked(mark)
        for core in out.glob("core.*"):
            core.unlink()


def test_sigterm_keeps_the_cores_already_finished_and_removes_the_partial_one(
    hung: subprocess.Popen[bytes], big: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    out = tmp_path / "cores"
    argv = ["core", "grab", str(hung.pid), str(big.pid), "--dir", str(out), "--parallel", "1"]
    with rankscope_marked(*argv) as (rankscope, mark):
        wait_for(lambda: tracer(big.pid) != 0, 240, "the second gcore")  # one at a time: the first is done
        os.kill(rankscope.pid, signal.SIGTERM)
        assert rankscope.wait(30) == 143
        assert [p.name for p in out.iterdir()] == [f"core.{hung.pid}"]
        assert stat.S_IMODE((out / f"core.{hung.pid}").stat().st_mode) == 0o600
        assert wait_gone(mark) == []
        assert tracer(big.pid) == 0 and state(big.pid) not in ("T", "t")
    for core in out.glob("core.*"):
        core.unlink()
