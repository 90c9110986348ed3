"""The in-process handler's SIGTERM dump (``<base>.term``): every thread's stack when a launcher
tears the rank down, chained to the SIGTERM handling the process had."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rankscope.inproc import runtime

PROGRAM = """
import signal, sys, time
mode = sys.argv[1]
def mine(signum, frame):
    print("own handler", flush=True)
    sys.exit(7)
if mode == "before":
    signal.signal(signal.SIGTERM, mine)
from rankscope.inproc import handler
assert handler.enable(), handler.last_error()
if mode == "after":
    signal.signal(signal.SIGTERM, mine)
def teardown_finds_me_here():
    print("up", flush=True)
    time.sleep(60)
teardown_finds_me_here()
"""


def _terminated(tmp_path: Path, mode: str) -> tuple[int, str, list[Path]]:
    """Run the program, SIGTERM it once it is up: (exit status, stdout, the .term files left)."""
    directory = tmp_path / "rt"
    env = {k: v for k, v in os.environ.items() if k != "RANKSCOPE_INPROC"}
    env[runtime.ENV_DIR] = str(directory)
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, mode],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, sorted(directory.glob("*.term"))


def test_sigterm_with_the_default_action_leaves_every_threads_stack_and_dies_of_it(tmp_path: Path) -> None:
    code, _, terms = _terminated(tmp_path, "default")
    assert code == -signal.SIGTERM  # the exit status a launcher reads is still the signal's
    (term,) = terms
    text = term.read_text()
    assert "in teardown_finds_me_here" in text and text.count("(most recent call first)") == 2
    assert oct(term.stat().st_mode & 0o777) == "0o600"


def test_a_handler_the_job_set_before_still_runs_and_the_dump_is_kept(tmp_path: Path) -> None:
    code, out, terms = _terminated(tmp_path, "before")
    assert code == 7 and "own handler" in out  # chained: the job's handler ended it its own way
    (term,) = terms  # kept through the normal exit that followed
    assert "in teardown_finds_me_here" in term.read_text()


def test_a_handler_the_job_sets_after_replaces_the_dump(tmp_path: Path) -> None:
    code, out, terms = _terminated(tmp_path, "after")
    assert code == 7 and "own handler" in out
    assert terms == []  # the empty file went with the normal exit


@pytest.mark.parametrize("variable", ["PYTHONFAULTHANDLER"])
def test_no_term_dump_where_the_job_runs_its_own_faulthandler(tmp_path: Path, variable: str) -> None:
    env = {**os.environ, runtime.ENV_DIR: str(tmp_path / "rt"), variable: "1"}
    env.pop("RANKSCOPE_INPROC", None)
    code = "from rankscope.inproc import handler; print(handler.enable())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True"]
    assert not list((tmp_path / "rt").glob("*.term"))
