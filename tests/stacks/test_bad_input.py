"""Targets that cannot be dumped: one clear line, a documented exit code, no traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from tests.support.cli import run_cli, run_cli_as
from tests.support.system import ensure_tools

from rankscope.stacks.pyspy import parse_dump


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr


def test_dead_pid() -> None:
    result = run_cli("stacks", "--pid", "999999")
    assert result.returncode == 8
    # One place for a failure: the report on stdout, nothing repeated on stderr.
    assert "pid 999999 [discover] no such process" in result.stdout
    assert result.stderr == ""


def test_non_python_pid() -> None:
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        result = run_cli("stacks", "--pid", str(proc.pid))
        assert result.returncode == 5
        assert "not a Python process (sleep)" in result.stdout
        assert result.stderr == ""
    finally:
        proc.kill()
        proc.wait()


def test_zombie_pid() -> None:
    proc = subprocess.Popen(["true"])
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, deliberately not reaped
        result = run_cli("stacks", "--pid", str(proc.pid), "--json")
        assert result.returncode == 5
        (failure,) = result.json()["failures"]
        assert "zombie" in failure["reason"] and str(os.getpid()) in failure["reason"]
    finally:
        proc.wait()


def test_partial_results_are_kept(python_sleeper: subprocess.Popen[bytes]) -> None:
    result = run_cli("stacks", "--pid", str(python_sleeper.pid), "--pid", "999999", "--json")
    assert result.returncode == 4
    doc = result.json()
    assert [p["pid"] for p in doc["processes"] if p["dumped"]] == [python_sleeper.pid]
    assert [f["target"] for f in doc["failures"]] == ["pid 999999"]
    text = run_cli("stacks", "--pid", str(python_sleeper.pid), "--pid", "999999")
    assert text.returncode == 4 and "Failed (1)" in text.stdout and "pid 999999 [discover]" in text.stdout


def test_permission_denied_explains_the_fix(python_sleeper: subprocess.Popen[bytes], tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run rankscope as an unprivileged user")
    result = run_cli_as("65534", "stacks", "--pid", str(python_sleeper.pid), home=str(tmp_path))
    assert result.returncode == 7, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "permission denied" in line]
    assert "sudo" in line  # the fix is in the same line
    assert "the process belongs to uid 0 (root), you are uid 65534" in line
    assert result.stderr == ""


def test_pyspy_missing(tmp_path: Path, python_sleeper: subprocess.Popen[bytes]) -> None:
    # An interpreter outside the venv (no py-spy beside it) and a PATH without py-spy.
    base_python = Path(sys.base_prefix) / "bin" / Path(sys.executable).name
    if not base_python.exists():
        pytest.skip("no base interpreter to run outside the virtual environment")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join(
            [sysconfig.get_paths()["purelib"], str(Path(__file__).parents[2] / "src")]
        ),
    }
    if shutil.which("py-spy", path=env["PATH"]):
        pytest.skip("a system-wide py-spy is installed")
    result = subprocess.run(
        [str(base_python), "-m", "rankscope", "stacks", "--pid", str(python_sleeper.pid)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 6, result.stderr
    assert result.stderr.startswith(
        "rankscope: error: py-spy not found on PATH — install it: pip install py-spy"
    )


@pytest.mark.needs("pidns")
def test_no_job_found_message() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (util-linux) for a PID namespace")
    # In a PID namespace of its own, no job of another test (or user) of this machine is visible.
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "rankscope", "stacks"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "no distributed job found on this node" in result.stderr and "--pid" in result.stderr
    assert result.stdout == ""


def test_garbage_pyspy_output_is_a_parse_error() -> None:
    with pytest.raises(ValueError):
        parse_dump(b"\x00\xffnot json", 1)
    with pytest.raises(ValueError):
        parse_dump(b'{"not": "a list"}', 1)


def test_bad_options_are_usage_errors() -> None:
    result = run_cli("stacks", "--samples", "0")
    assert result.returncode == 2 and "--samples" in result.stderr


@pytest.mark.needs("ssh")
def test_unknown_host_says_why_once(tmp_path: Path) -> None:
    """No node answered: the header says so (no "(none) on ?"), and the node's failure is in the report once."""
    ensure_tools("ssh")
    result = run_cli("stacks", "--hosts", "rankscope-no-such-host", "--via", "ssh", "--node-timeout", "20")
    assert result.returncode == 5, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("rankscope stacks: none of 1 nodes answered (rankscope-no-such-host) — "), first
    assert " on ?" not in first and "(none)" not in first
    assert "rankscope-no-such-host [unreachable] ssh: Could not resolve hostname" in result.stdout
    assert result.stdout.count("rankscope-no-such-host [unreachable]") == 1 and result.stderr == ""
