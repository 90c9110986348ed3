"""Real processes for `fds` and `strace`: one blocked on a silent socket, one failing writes in a loop."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Connects to the port given, says its pid and local port, then waits for a reply that never comes.
_CLIENT = """
import os, socket, sys
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print(os.getpid(), sock.getsockname()[1], flush=True)
sock.recv(16)
"""

#: Writes to /dev/full (ENOSPC) and opens a missing path (ENOENT) in a loop.
_FAILING = """
import os, sys, time
full = os.open("/dev/full", os.O_WRONLY)
print(os.getpid(), flush=True)
while True:
    try:
        os.write(full, b"x")
    except OSError:
        pass
    try:
        open(sys.argv[1])
    except OSError:
        pass
    time.sleep(0.02)
"""


def _end(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@dataclass
class SilentPeer:
    pid: int
    client_port: int
    server_port: int


@pytest.fixture
def silent_peer() -> Iterator[SilentPeer]:
    """A client process blocked in recv on a connection to a listener (in this test) that never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-c", _CLIENT, str(port)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert process.stdout is not None
        pid, client_port = process.stdout.readline().split()
        accepted, _ = listener.accept()
        yield SilentPeer(int(pid), int(client_port), port)
        accepted.close()
    finally:
        _end(process)
        listener.close()


@dataclass
class FailingWriter:
    pid: int
    missing: Path


@pytest.fixture
def failing_writer(tmp_path: Path) -> Iterator[FailingWriter]:
    missing = tmp_path / "no-such-dir" / "checkpoint.pt"
    process = subprocess.Popen(
        [sys.executable, "-c", _FAILING, str(missing)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        yield FailingWriter(int(process.stdout.readline()), missing)
    finally:
        _end(process)
