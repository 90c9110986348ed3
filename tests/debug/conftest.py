"""Programs driven through a pseudo-terminal, as a person at a keyboard drives them.

Each program leads a session of its own with the pseudo-terminal as its controlling terminal
(what a shell gives a foreground command); teardown kills its process group and its
descendants' groups.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable, Optional

import pytest

from rankscope.demo.launch import kill_tree

JOB = Path(__file__).parent / "jobs" / "bp_job.py"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def job_argv(*args: str, launcher: tuple[str, ...] = ()) -> list[str]:
    return [TORCHRUN, "--standalone", "--nproc-per-node=2", *launcher, str(JOB), *args]


def job_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _become_terminal_owner() -> None:
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A program on the slave side of a pseudo-terminal; the test types and reads on the master side."""

    def __init__(self, argv: list[str], env: Optional[dict[str, str]] = None) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=_become_terminal_owner
        )
        os.close(slave)
        self.seen = ""  # everything read so far
        self._unread = ""

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every process holding the slave side has gone
            return False
        if not chunk:
            return False
        text = chunk.decode("utf-8", "replace").replace("\r\n", "\n")
        self.seen += text
        self._unread += text
        return True

    def expect(self, wanted: str, timeout: float = 60.0) -> str:
        """Read until ``wanted`` appears; what came before it and it (the rest stays unread)."""
        deadline = time.monotonic() + timeout
        while wanted not in self._unread:
            if time.monotonic() > deadline or not self._read(0.2):
                raise AssertionError(f"{wanted!r} never came; the terminal shows:\n{self.seen}")
        end = self._unread.index(wanted) + len(wanted)
        got, self._unread = self._unread[:end], self._unread[end:]
        return got

    def shown(self, wanted: str, timeout: float = 60.0) -> None:
        """Read until ``wanted`` has appeared anywhere (in what was expected already, too); nothing is consumed."""
        deadline = time.monotonic() + timeout
        while wanted not in self.seen:
            if time.monotonic() > deadline or not self._read(0.2):
                raise AssertionError(f"{wanted!r} never came; the terminal shows:\n{self.seen}")

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def send_eof(self) -> None:
        os.write(self.master, b"\x04")

    def wait(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        self._read(0.1)
        return self.process.wait(timeout=1)

    def kill(self) -> None:
        """Its process group and every descendant's (torchrun starts each worker in a session of its own)."""
        kill_tree(self.process, grace=1.0)
        with contextlib.suppress(OSError):
            os.close(self.master)


@pytest.fixture
def terminal() -> Iterator[Callable[..., Terminal]]:
    """Start programs on pseudo-terminals; each one's process tree is killed in teardown."""
    started: list[Terminal] = []

    def start(argv: list[str], env: Optional[dict[str, str]] = None) -> Terminal:
        started.append(Terminal(argv, env))
        return started[-1]

    yield start
    for each in started:
        each.kill()
