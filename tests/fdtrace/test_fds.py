"""`rankscope fds` on real processes: a socket's both ends, files, bad pids, another user's process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fdtrace.conftest import SilentPeer
from tests.support.cli import run_cli, run_cli_as

from rankscope.inspect.collect import process_fds
from rankscope.inspect.report import FdKind


def test_a_blocked_client_shows_its_socket_with_both_addresses(silent_peer: SilentPeer) -> None:
    result = run_cli("fds", str(silent_peer.pid), "--json")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert document["schema"] == "rankscope.fds/1"
    (process,) = document["processes"]
    sockets = [fd for fd in process["fds"] if fd["kind"] == "socket"]
    assert any(
        fd["local"] == f"127.0.0.1:{silent_peer.client_port}"
        and fd["peer"] == f"127.0.0.1:{silent_peer.server_port}"
        and fd["state"] == "ESTABLISHED"
        and fd["protocol"] == "tcp"
        for fd in sockets
    ), sockets
    assert process["counts"]["socket"] == len(sockets)

    text = run_cli("fds", str(silent_peer.pid))
    assert (
        f"127.0.0.1:{silent_peer.client_port} -> 127.0.0.1:{silent_peer.server_port} ESTABLISHED"
        in text.stdout
    )
    # The summary comes before the table.
    assert text.stdout.index("descriptors (limit") < text.stdout.index("FD  KIND")


def test_files_pipes_and_deleted_files_are_told_apart(tmp_path: Path) -> None:
    kept = tmp_path / "data.bin"
    kept.write_bytes(b"0123456789")
    gone = tmp_path / "scratch.tmp"
    script = (
        "import os, sys, time\n"
        f"f = open({str(kept)!r}, 'rb'); f.read(4)\n"
        f"g = open({str(gone)!r}, 'w'); os.unlink({str(gone)!r})\n"
        "r, w = os.pipe(); e = os.eventfd(0) if hasattr(os, 'eventfd') else None\n"
        "import select; ep = select.epoll(); ep.register(r, select.EPOLLIN)\n"
        "print(f.fileno(), g.fileno(), r, w, ep.fileno(), flush=True); time.sleep(60)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert process.stdout is not None
        f, g, r, w, ep = map(int, process.stdout.readline().split())
        found = process_fds(process.pid).by_fd()
        assert found[f].kind == FdKind.FILE and found[f].target == str(kept) and found[f].mode == "r"
        assert found[f].offset == 10  # buffered read: the whole small file
        assert found[g].kind == FdKind.DELETED and found[g].mode == "w"
        assert found[r].kind == found[w].kind == FdKind.PIPE
        assert found[ep].kind == FdKind.EPOLL and found[ep].watches == (r,)
        assert FdKind.EVENTFD in {entry.kind for entry in found.values()}
    finally:
        process.kill()
        process.wait()


def test_a_pid_that_does_not_exist_is_bad_input() -> None:
    result = run_cli("fds", "999999999")
    assert result.returncode == 8
    assert result.stderr.strip() == (
        "rankscope: error: no process 999999999 — check the pid (ps -p PID); it may have exited"
    )


def test_another_users_process_is_permission_denied(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run the command as another user")
    tmp_path.chmod(0o777)
    result = run_cli_as("65534", "fds", str(os.getpid()), home=str(tmp_path))
    assert result.returncode == 7, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot read the descriptors of pid {os.getpid()}" in lines[0]
