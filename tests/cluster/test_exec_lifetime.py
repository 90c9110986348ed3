"""Nothing `rankscope exec` starts outlives it: node timeouts, SIGINT and SIGTERM over real sshd and pdsh.

The remote command writes its pid to a file; after rankscope is done that pid must be gone (a
zombie waiting for its reaper counts as gone), and no local process may still name the test's
scratch directory on its command line (pdsh's ssh clients run in sessions of their own).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cluster_fixtures import client_env, run_via, via_args
from tests.support.leftovers import alive, gone_within, kill_recorded
from tests.support.sshd import Sshd

VIAS = ["ssh", "pdsh"]


def _start_exec(sshd: Sshd, *args: str, via: str) -> subprocess.Popen[str]:
    """``rankscope exec`` (:func:`via_args`) left running, its output in pipes, in a session of its own."""
    argv = [sys.executable, "-m", "rankscope", *via_args(sshd, "exec", *args, via=via)]
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=client_env(),
        start_new_session=True,
    )


def _naming(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (this test's scratch directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _transports_of(node: str, text: str) -> list[int]:
    """Live ssh/pdsh processes for ``node`` (a word of their argv) whose command line names ``text``."""
    found = []
    for pid in _naming(text):
        with contextlib.suppress(OSError):
            if node.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                found.append(pid)
    return found


def _orphaned_guardians_within(seconds: float) -> list[int]:
    """Guardians (``guardian.py RUN_ID GRACE``, the run id ``PID.HEX``) whose rankscope has exited,
    once none is left, or those left after ``seconds``: each ends its run's carriers, then exits."""
    end = time.monotonic() + seconds
    while True:
        left = []
        for pid in _naming("rankscope/guardian.py"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                # Read once more: a guardian that exited since _naming has an empty command line.
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                at = [i for i, word in enumerate(argv) if word.endswith(b"guardian.py")]
                if not at:
                    continue
                run_pid = int(argv[at[0] + 1].split(b".")[0])
                if not alive(run_pid):
                    left.append(pid)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.1)


def _none_naming_within(text: str, seconds: float) -> list[int]:
    """``_naming(text)`` once it is empty, or what is left after ``seconds`` (the remote watcher
    lives a second after it killed the command, to send the SIGKILL)."""
    end = time.monotonic() + seconds
    while True:
        left = _naming(text)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.1)


def _wait_for(path: Path, seconds: float = 20.0) -> str:
    end = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)
    return path.read_text().strip()


def _slow_command(pid_file: Path) -> str:
    """The node's command: note its pid, then run far longer than any test."""
    return f'sh -c "echo \\$\\$ > {pid_file}; exec sleep 41"'


@pytest.fixture
def cleanup() -> Iterator[list[Path]]:
    """Pid files whose processes are killed after the test, whatever happened."""
    pid_files: list[Path] = []
    yield pid_files
    for pid_file in pid_files:
        kill_recorded(pid_file)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("via", VIAS)
def test_the_remote_command_dies_at_the_node_timeout(
    sshd_nodes: Sshd, pdsh_installed: None, tmp_path: Path, cleanup: list[Path], via: str
) -> None:
    pid_file = tmp_path / "remote.pid"
    cleanup.append(pid_file)
    result = run_via(
        sshd_nodes,
        "exec",
        "--hosts",
        "node01",
        "--node-timeout",
        "3",
        "--",
        _slow_command(pid_file),
        via=via,
        timeout=40,
    )
    assert result.returncode == 5, result.stdout + result.stderr
    assert "timeout: command still running after 3s" in result.stdout
    # Without the remote watcher `sleep 41` ran on with ppid 1.
    assert gone_within(int(pid_file.read_text()), 5)
    assert _none_naming_within(str(tmp_path), 5) == []


#: A ProxyCommand that relays ssh to sshd until a trigger file appears, then relays nothing more
#: and keeps both connections open: the network to a logged-in node went dark.
STALLING_RELAY = """
import os, select, socket, sys, time
host, port, trigger = sys.argv[1], int(sys.argv[2]), sys.argv[3]
upstream = socket.create_connection((host, port))
ends = {0: upstream.fileno(), upstream.fileno(): 1}
while not os.path.exists(trigger):
    ready, _, _ = select.select([0, upstream.fileno()], [], [], 0.1)
    for fd in ready:
        data = os.read(fd, 65536)
        if not data:
            sys.exit(0)
        os.write(ends[fd], data)
time.sleep(600)
"""


@pytest.mark.timeout(60)
def test_pdsh_leaves_no_ssh_client_behind_when_the_network_goes_dark(
    sshd_nodes: Sshd, pdsh_installed: None, tmp_path: Path, cleanup: list[Path]
) -> None:
    # pdsh runs ssh in a session of its own: killing pdsh's group at the node timeout left that
    # ssh (and its proxy) running for as long as the dead connection lasts.
    relay, trigger, pid_file = tmp_path / "relay.py", tmp_path / "go-dark", tmp_path / "remote.pid"
    cleanup.append(pid_file)
    relay.write_text(STALLING_RELAY)
    proxy = f"{sys.executable} {relay} {sshd_nodes.listen} {sshd_nodes.port} {trigger}"
    sshd_nodes.add_alias("goesdark", ProxyCommand=proxy)
    argv = ["--hosts", "goesdark", "--node-timeout", "6", "--", _slow_command(pid_file)]
    process = _start_exec(sshd_nodes, *argv, via="pdsh")
    try:
        _wait_for(pid_file)
        trigger.touch()
        stdout, stderr = process.communicate(timeout=30)
        assert process.returncode == 5, stdout + stderr
        assert "goesdark  timeout: command still running after 6s" in stdout
        assert _none_naming_within(str(relay), 5) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for pid in _naming(str(relay)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("via", VIAS)
def test_a_signal_ends_exec_at_once_with_the_partial_results(
    sshd_nodes: Sshd, pdsh_installed: None, tmp_path: Path, cleanup: list[Path], via: str, sig: int
) -> None:
    pid_file, fast_done = tmp_path / "slow.pid", tmp_path / "fast.done"
    cleanup.append(pid_file)
    command = (
        f'case "$RANKSCOPE_NODE" in node01) echo fast answer; touch {fast_done};; '
        f"*) {_slow_command(pid_file)};; esac"
    )
    process = _start_exec(
        sshd_nodes, "--hosts", "node[01-02]", "--node-timeout", "60", "--", command, via=via
    )
    try:
        remote_pid = int(_wait_for(pid_file))
        _wait_for_file(fast_done)
        # The fast node is done when its ssh (or pdsh) has exited: then its answer is in.
        end = time.monotonic() + 20
        while _transports_of("node01", str(tmp_path)):
            assert time.monotonic() < end, "node01's transport never exited"
            time.sleep(0.05)
        time.sleep(0.3)
        process.send_signal(sig)
        # Far sooner than the 60 s node timeout.
        stdout, stderr = process.communicate(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == 128 + sig, stdout + stderr
    assert "fast answer" in stdout
    assert f"node02  interrupted: interrupted by {signal.Signals(sig).name} before it answered" in stdout
    assert f"rankscope: interrupted by {signal.Signals(sig).name}" in stderr
    assert gone_within(remote_pid, 5)
    assert _none_naming_within(str(tmp_path), 5) == []


def _wait_for_file(path: Path, seconds: float = 20.0) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.timeout(60)
def test_an_ssh_controlpersist_master_is_kept_as_asked(sshd_nodes: Sshd) -> None:
    # The one process rankscope's ssh leaves on purpose: ControlPersist says how long it lives.
    tmp_path = Path(tempfile.mkdtemp(prefix="rs-cm-", dir="/tmp"))  # a socket path is short
    control = tmp_path / "cm-%C"
    options = ["--ssh-option", "ControlMaster=auto", "--ssh-option", f"ControlPath={control}"]
    options += ["--ssh-option", "ControlPersist=30"]
    try:
        for _ in range(2):  # the second run goes through the master the first one left
            result = run_via(sshd_nodes, "exec", *options, "--hosts", "node01", "--", "echo kept", timeout=40)
            assert result.returncode == 0, result.stdout + result.stderr
            assert len(_naming(f"{tmp_path}/cm-")) == 1
        # The guardian of each run ends what carries the run's token once the run is gone; the
        # master (whose environment ssh overwrites with its title) is still there after them.
        [master] = _naming(f"{tmp_path}/cm-")
        assert _orphaned_guardians_within(10) == []
        assert _naming(f"{tmp_path}/cm-") == [master]
    finally:
        for pid in _naming(str(tmp_path)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(tmp_path, ignore_errors=True)
