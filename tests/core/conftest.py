"""Real crashes and real hung processes, with their core files: made here, deleted in teardown.

kernel.core_pattern is machine-wide: the fixture points it at the test's directory and puts the
old value back afterwards, holding ``machine_lock("core-pattern")`` all the while, so other tests
and test runs that crash processes or read the pattern wait for it (docs/testing.md).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
from tests.support.machine_lock import machine_lock

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")

#: A worker thread reads address 0 (ctypes.string_at): SIGSEGV in that thread, not the main one.
CRASH = """
import ctypes, sys, threading, time

def crash_in_worker():
    time.sleep(0.1)
    ctypes.string_at(0)

def main():
    threading.Thread(target=crash_in_worker, name="worker").start()
    time.sleep(60)

main()
"""

#: A C++ exception nobody catches, on a worker thread: std::terminate, then abort (SIGABRT).
TERMINATE = """
import ctypes, threading

def worker():
    ctypes.CDLL("libstdc++.so.6")._ZSt9terminatev()

thread = threading.Thread(target=worker)
thread.start()
thread.join()
"""

#: A process that hangs in a named function (a live process to take a core of with gcore).
HANG = """
import sys, time

def hang_here():
    print("ready", flush=True)
    time.sleep(600)

hang_here()
"""


def _core_limit() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def real_python() -> str:
    """The interpreter binary itself (not a pyenv shim): what the kernel records in the core."""
    return os.path.realpath(sys.executable)


@dataclass
class Crashes:
    directory: Path

    def crash(
        self,
        rank: Optional[int] = None,
        source: str = CRASH,
        expect: int = signal.SIGSEGV,
        name: str = "crash.py",
        env_extra: Optional[dict[str, str]] = None,
    ) -> Path:
        """Run a crashing program (with RANK set when given, and ``env_extra``); the path of the core
        it left."""
        script = self.directory / name
        script.write_text(source)
        env = dict(os.environ, **(env_extra or {}))
        if rank is not None:
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="8")
        proc = subprocess.Popen(
            [real_python(), str(script)], preexec_fn=_core_limit, env=env, stderr=subprocess.PIPE
        )
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == -expect, err
        core = self.directory / f"core.{proc.pid}"
        for _ in range(100):  # the kernel finishes writing after the parent sees the exit
            if core.exists():
                break
            time.sleep(0.05)
        assert core.exists(), sorted(os.listdir(self.directory))
        return core


@pytest.fixture
def crashes(tmp_path: Path) -> Iterator[Crashes]:
    """Crashing programs whose cores land in tmp_path as core.PID (core_pattern restored afterwards)."""
    if os.geteuid() != 0:
        pytest.skip("setting kernel.core_pattern needs root")
    with machine_lock("core-pattern"):
        saved = CORE_PATTERN.read_text().strip()
        CORE_PATTERN.write_text(f"{tmp_path}/core.%p\n")
        try:
            yield Crashes(tmp_path)
        finally:
            CORE_PATTERN.write_text(saved + "\n")
            for core in tmp_path.glob("core.*"):
                core.unlink()


@contextlib.contextmanager
def hung_process(
    directory: Path, source: str = HANG, name: str = "hang.py"
) -> Iterator[subprocess.Popen[bytes]]:
    """A live python running ``source`` (which prints "ready" once set); its group killed at the end."""
    script = directory / name
    script.write_text(source)
    proc = subprocess.Popen([real_python(), str(script)], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def hung(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A live python sleeping in hang_here(); killed in teardown."""
    with hung_process(tmp_path) as proc:
        yield proc
