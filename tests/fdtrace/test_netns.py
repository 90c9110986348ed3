"""Sockets are read in the process's own network namespace (/proc/PID/net), not rankscope's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from tests.support.cli import run_cli

#: Listens on 0.0.0.0 (a fresh namespace has no interface up, and needs none for that).
_LISTENER = """
import os, socket, time
sock = socket.socket(); sock.bind(("0.0.0.0", 0)); sock.listen()
print(os.getpid(), sock.getsockname()[1], os.stat(f"/proc/self/fd/{sock.fileno()}").st_ino, flush=True)
time.sleep(120)
"""


@pytest.mark.needs("pidns")
def test_a_socket_in_another_network_namespace_gets_its_address() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (util-linux) for a network namespace")
    process = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c", _LISTENER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        pid, port, inode = map(int, process.stdout.readline().split())
        # Not in this namespace's table: a reader of /proc/net would not know the socket.
        with open("/proc/net/tcp") as table:
            assert f" {inode} " not in table.read()
        result = run_cli("fds", str(pid), "--json")
        assert result.returncode == 0, result.stderr
        (socket,) = [fd for fd in result.json()["processes"][0]["fds"] if fd["kind"] == "socket"]
        assert (socket["protocol"], socket["local"], socket["state"]) == ("tcp", f"0.0.0.0:{port}", "LISTEN")
        assert socket["target"] == f"socket:[{inode}]"
    finally:
        process.kill()
        process.wait()
