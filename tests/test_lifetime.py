"""The process-lifetime API (rankscope.lifetime) on real processes: trees ended, output bounded,
children reaped once, the guardian's work when the parent is SIGKILLed, and the detached job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.support.leftovers import carrying, kill_marked, marked_env, state, wait_for, wait_gone

from rankscope import lifetime

#: A child that leaves a grandchild in a session of its own (as torchrun does with its workers).
ESCAPING = ["sh", "-c", "setsid sleep 300 & echo started; sleep 300"]


def test_end_reaches_a_grandchild_in_another_session() -> None:
    env, mark = marked_env()
    try:
        child = lifetime.start(ESCAPING, 60, env=env)
        wait_for(lambda: len(carrying(mark)) == 3, 30, "sh and both sleeps")
        child.end()
        assert child.returncode == -signal.SIGTERM
        assert wait_gone(mark, timeout=5) == []
    finally:
        kill_marked(mark)


def test_a_deadline_ends_the_tree_and_output_is_kept_within_its_bound() -> None:
    env, mark = marked_env()
    try:
        script = (
            "import sys; sys.stdout.write('x' * 3_000_000); sys.stdout.flush(); import time; time.sleep(300)"
        )
        child = lifetime.run([sys.executable, "-c", script], 3, env=env, capture=200_000)
        assert child.timed_out and child.returncode == -signal.SIGTERM
        assert child.output is not None and child.output.truncated
        kept = child.output.bytes()
        assert len(kept) < 200_100 and kept.startswith(b"xxx") and kept.endswith(b"xxx")
        assert b"bytes cut" in kept
        assert wait_gone(mark, timeout=5) == []
    finally:
        kill_marked(mark)


def test_a_child_is_reaped_once_and_keeps_its_code() -> None:
    child = lifetime.run(["sh", "-c", "echo out; echo err >&2; exit 3"], 30)
    assert (child.returncode, child.timed_out, child.text()) == (3, False, "out\nerr\n")
    assert child.reap() == 3 and child.end() == 3
    assert not os.path.exists(f"/proc/{child.pid}/stat") or state(child.pid) != "Z"


def test_a_stop_signal_pipe_ends_the_wait_early() -> None:
    read, write = os.pipe()
    try:
        child = lifetime.start(["sleep", "300"], 300)
        os.write(write, b"!")
        assert lifetime.wait([child], read) is True
        assert child.returncode is None  # the caller decides: here, end it
        assert child.end() == -signal.SIGTERM
    finally:
        os.close(read)
        os.close(write)


#: What a rankscope run does: a child whose grandchild escapes, a target it holds stopped, a private
#: directory; then it is SIGKILLed by the test.
PARENT = textwrap.dedent(
    """
    import os, signal, sys, time
    from rankscope import lifetime
    target = int(sys.argv[1])
    lifetime.start(["sh", "-c", "setsid sleep 300 & sleep 300"], 600)
    lifetime.note_target(target, "S")
    os.kill(target, signal.SIGSTOP)  # as a tracer killed mid-dump can leave it
    held = lifetime.private_tempdir("rankscope-test-")
    directory = held.__enter__()
    with open(os.path.join(directory, "partial"), "w") as handle:
        handle.write("secret")
    detached = lifetime.start_detached(["sleep", "300"])
    print(directory, detached.pid, flush=True)
    time.sleep(600)
    """
)


def test_the_guardian_ends_the_tree_continues_the_target_and_removes_paths_when_the_parent_is_killed(
    tmp_path: Path,
) -> None:
    env, mark = marked_env()
    target = subprocess.Popen(["sleep", "300"], start_new_session=True)
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(target.pid)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    detached = 0
    try:
        assert parent.stdout is not None
        directory, detached_pid = parent.stdout.readline().split()
        detached = int(detached_pid)
        wait_for(lambda: state(target.pid) == "T", 10, "the target to be stopped")
        assert len(carrying(mark, skip=(parent.pid, detached))) == 3  # sh and its two sleeps
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert wait_gone(mark, skip=(detached,)) == []
        wait_for(lambda: state(target.pid) == "S", 10, "the target to be continued")
        wait_for(lambda: not os.path.exists(directory), 10, "the directory to be removed")
        assert state(detached) == "S"  # the user's job started detached outlives rankscope
        with open(f"/proc/{detached}/environ", "rb") as handle:
            assert lifetime.STARTED_BY.encode() not in handle.read()
    finally:
        kill_marked(mark)
        for pid in (target.pid, parent.pid, detached):
            if pid and state(pid) not in ("", "Z"):
                os.kill(pid, signal.SIGKILL)
        target.wait()
        parent.wait()


def test_sigterm_raises_terminated_once() -> None:
    with pytest.raises(lifetime.Terminated), lifetime.sigterm_raises():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            os.sched_yield()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_end_all_ends_children_that_worker_threads_wait_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """end_all ends every child of this process: the test sees only its own, or a session-scoped job
    that this pytest worker started for other files (a hung torchrun) would end with it."""
    import threading

    monkeypatch.setattr(lifetime, "_LIVE", set())
    children: list[lifetime.Child] = []

    def worker() -> None:
        children.append(lifetime.start(["sleep", "300"], 300))
        lifetime.wait(children)

    thread = threading.Thread(target=worker)
    thread.start()
    wait_for(lambda: children, 10, "the worker's child")
    lifetime.end_all()
    thread.join(10)
    assert not thread.is_alive()
    assert children[0].returncode == -signal.SIGTERM


def test_the_guardian_program_imports_only_the_standard_library() -> None:
    import ast

    source = Path(lifetime.__file__).with_name("guardian.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert imported <= {"__future__", "os", "signal", "sys", "time", "typing", "shutil"}, imported


def test_a_child_whose_output_goes_to_a_file_is_waited_for(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with open(log, "wb") as handle:
        child = lifetime.start(["sh", "-c", "echo to-the-file; exit 4"], 30, capture=None, stdout=handle)
    lifetime.wait([child])
    assert child.returncode == 4 and log.read_text() == "to-the-file\n"


def test_children_still_run_where_no_guardian_can_be_started() -> None:
    script = textwrap.dedent(
        """
        import sys
        from rankscope import lifetime
        sys.executable = "/nonexistent/python"  # an embedded interpreter: nothing to run the guardian with
        child = lifetime.run(["echo", "ran"], 30)
        print(child.returncode, child.text().strip(), lifetime.guardian().pid)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["0", "ran", "0"], result.stderr


def test_the_guardian_skips_a_line_it_cannot_read_and_still_removes_what_was_noted(tmp_path: Path) -> None:
    noted = tmp_path / "partial-core"
    noted.write_text("secret")
    program = Path(lifetime.__file__).with_name("guardian.py")
    guardian = subprocess.Popen(
        [sys.executable, "-I", "-S", str(program), "1.test", "0.1"], stdin=subprocess.PIPE
    )
    assert guardian.stdin is not None
    guardian.stdin.write(b"T not-a-pid S\nP zz\n" + b"P " + os.fsencode(str(noted)).hex().encode() + b"\n")
    guardian.stdin.close()  # as when rankscope dies
    assert guardian.wait(30) == 0
    assert not noted.exists()
