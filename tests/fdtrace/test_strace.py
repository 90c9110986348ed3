"""`rankscope strace` on real processes: blocked on a silent peer, failing writes, another tracer."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from tests.fdtrace.conftest import FailingWriter, SilentPeer
from tests.support.cli import run_cli

from rankscope import procfs

pytestmark = pytest.mark.needs("strace")


def test_a_client_waiting_for_a_silent_peer_is_blocked_on_that_peer(silent_peer: SilentPeer) -> None:
    result = run_cli("strace", str(silent_peer.pid), "--seconds", "1", "--json")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert document["schema"] == "rankscope.strace/1"
    (process,) = document["processes"]
    (blocked,) = process["blocked"]
    assert blocked["syscall"] in ("recvfrom", "read", "poll", "ppoll")
    peer = f"127.0.0.1:{silent_peer.client_port} -> 127.0.0.1:{silent_peer.server_port} ESTABLISHED"
    assert peer in blocked["on"]
    assert blocked["waited"] >= 0.5
    # Left running and untraced.
    assert process["state_after"] == "S" and not process["continued"]
    assert procfs.tracer_pid(silent_peer.pid) == 0

    text = run_cli("strace", str(silent_peer.pid), "--seconds", "0.5").stdout
    assert "blocked now" in text and peer in text


def test_failing_writes_are_grouped_by_errno_with_their_paths(failing_writer: FailingWriter) -> None:
    result = run_cli("strace", str(failing_writer.pid), "--seconds", "1", "--json")
    assert result.returncode == 0, result.stderr
    (process,) = result.json()["processes"]
    groups = {group["errno"]: group for group in process["failures"]}
    assert groups["ENOSPC"]["targets"] == ["fd 3: /dev/full"]
    assert groups["ENOSPC"]["syscalls"] == {"write": groups["ENOSPC"]["count"]}
    assert groups["ENOENT"]["targets"][0] == str(failing_writer.missing)
    assert groups["ENOENT"]["count"] >= 5 and not groups["ENOENT"]["noise"]
    counts = {count["name"]: count for count in process["syscalls"]}
    assert counts["write"]["errors"] == counts["write"]["calls"]

    text = run_cli("strace", str(failing_writer.pid), "--seconds", "0.5").stdout
    assert "ENOSPC (No space left on device)" in text and str(failing_writer.missing) in text
    assert text.index("failing calls:") < text.index("SYSCALL")


def test_a_process_another_strace_holds_is_refused_with_its_name(silent_peer: SilentPeer) -> None:
    holder = subprocess.Popen(
        ["strace", "-p", str(silent_peer.pid), "-o", "/dev/null"],
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while procfs.tracer_pid(silent_peer.pid) != holder.pid and time.monotonic() < deadline:
            time.sleep(0.05)
        result = run_cli("strace", str(silent_peer.pid), "--seconds", "0.5")
        assert result.returncode == 7, result.stderr
        assert f"already traced by strace (pid {holder.pid})" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    finally:
        holder.terminate()
        holder.wait()


def test_a_pid_that_does_not_exist_is_bad_input() -> None:
    result = run_cli("strace", "999999999", "--seconds", "0.5")
    assert result.returncode == 8
    assert "no process 999999999" in result.stderr


def test_ctrl_c_detaches_prints_what_was_traced_and_leaves_the_process_running(
    silent_peer: SilentPeer,
) -> None:
    import os
    import signal
    import sys

    rankscope = subprocess.Popen(
        [sys.executable, "-m", "rankscope", "strace", str(silent_peer.pid), "--seconds", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while procfs.tracer_pid(silent_peer.pid) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert procfs.tracer_pid(silent_peer.pid) != 0, "strace never attached"
        rankscope.send_signal(signal.SIGINT)
        stdout, stderr = rankscope.communicate(timeout=20)
    finally:
        if rankscope.poll() is None:
            os.killpg(rankscope.pid, signal.SIGKILL)
            rankscope.wait()
    assert rankscope.returncode == 130, stderr
    assert "blocked now" in stdout and f"127.0.0.1:{silent_peer.server_port}" in stdout
    assert procfs.tracer_pid(silent_peer.pid) == 0
    assert procfs.process(silent_peer.pid).state == "S"


def test_another_users_process_is_permission_denied(silent_peer: SilentPeer, tmp_path: Path) -> None:
    import os

    from tests.support.cli import run_cli_as

    if os.geteuid() != 0:
        pytest.skip("needs root to run the command as another user")
    tmp_path.chmod(0o777)
    result = run_cli_as("65534", "strace", str(silent_peer.pid), "--seconds", "0.5", home=str(tmp_path))
    assert result.returncode == 7, result.stderr
    assert (
        len(result.stderr.strip().splitlines()) == 1
        and f"cannot trace pid {silent_peer.pid}" in result.stderr
    )
    assert procfs.tracer_pid(silent_peer.pid) == 0


@pytest.mark.parametrize("verb", ["strace", "fds"])
def test_a_zombie_is_bad_input_that_points_to_its_parent(verb: str) -> None:
    import os

    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while procfs.process(child.pid).state != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        result = run_cli(verb, str(child.pid))
        assert result.returncode == 8, result.stderr
        assert (
            f"pid {child.pid} has exited (a zombie its parent {os.getpid()} has not reaped)" in result.stderr
        )
        assert f"rankscope {verb} {os.getpid()}" in result.stderr
    finally:
        child.wait()


#: Threads that name themselves (prctl PR_SET_NAME sets comm; threading's name= does not), each
#: blocked in a different call: a pipe read, a futex wait with a timeout, a sleep.
NAMED_THREADS = """
import ctypes, os, threading, time

libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe()

def named(name, block):
    def run():
        libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
        block()
    return run

blocks = {
    "rs-reader": lambda: os.read(r, 1),
    "rs-waiter": lambda: threading.Event().wait(600),
    "rs-sleeper": lambda: time.sleep(600),
}
for name, block in blocks.items():
    threading.Thread(target=named(name, block), daemon=True).start()
def names():
    return {open(f"/proc/self/task/{tid}/comm").read().strip() for tid in os.listdir("/proc/self/task")}

while not set(blocks) <= names():
    time.sleep(0.01)
time.sleep(0.3)  # each thread into its call
print("ready", flush=True)
threading.Event().wait()
"""


def test_blocked_calls_carry_thread_names_and_a_futex_restart_is_not_called_a_read(tmp_path: Path) -> None:
    import os
    import signal
    import sys

    script = tmp_path / "named.py"
    script.write_text(NAMED_THREADS)
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        result = run_cli("strace", str(proc.pid), "--seconds", "1", "--json")
        assert result.returncode == 0, result.stderr
        (process,) = result.json()["processes"]
        by_name = {blocked["thread"]: blocked for blocked in process["blocked"]}
        assert {"rs-reader", "rs-waiter", "rs-sleeper"} <= set(by_name), process["blocked"]
        assert by_name["rs-reader"]["syscall"] == "read" and "pipe" in by_name["rs-reader"]["on"]
        waiter = by_name["rs-waiter"]
        # A futex with a timeout is resumed as restart_syscall after the attach; it is named a futex wait.
        if waiter["syscall"] == "restart_syscall":
            assert waiter["on"].startswith("a futex wait with a timeout"), waiter
        else:
            assert waiter["syscall"] == "futex" and "lock or condition" in waiter["on"]
        assert "interrupted read" not in waiter["on"]
        assert by_name["rs-sleeper"]["syscall"] in ("clock_nanosleep", "nanosleep", "restart_syscall")
        assert "sleep" in by_name["rs-sleeper"]["on"]

        text = run_cli("strace", str(proc.pid), "--seconds", "0.5").stdout
        assert "(rs-reader): read" in text and "(rs-waiter):" in text, text
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
