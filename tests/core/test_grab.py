"""`rankscope core grab`: gcore of live hung processes (then read by `core bt`), and --abort."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core.conftest import HANG, Crashes, real_python
from tests.support.cli import run_cli
from tests.support.machine_lock import machine_lock

from rankscope.core.grab import SPACE_MARGIN, Target, needed_bytes
from rankscope.core.notes import read_notes

GRAB_JOB = Path(__file__).with_name("grab_job.py")


@pytest.fixture
def two_hung(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    procs = [
        subprocess.Popen(
            [real_python(), str(script)],
            stdout=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, "RANK": str(rank), "WORLD_SIZE": "2"},
        )
        for rank in (0, 1)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.needs("gdb")
def test_grab_two_hung_processes_then_bt_groups_them(
    two_hung: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    out = tmp_path / "cores"
    result = run_cli("core", "grab", *(str(p.pid) for p in two_hung), "--dir", str(out), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    cores = sorted(out.iterdir())
    try:
        assert [c.name for c in cores] == sorted(f"core.{p.pid}" for p in two_hung)
        assert all(c.stat().st_mode & 0o077 == 0 for c in cores)  # private: process memory
        assert out.stat().st_mode & 0o777 == 0o700
        assert all(p.poll() is None for p in two_hung)  # gcore let them go on
        assert read_notes(str(cores[0])).written_by_gcore
        bt = run_cli("core", "bt", *map(str, cores))
        assert bt.returncode == 0, bt.stderr
        assert "the same crash on ranks 0-1 (2 cores)" in bt.stdout
        assert "a live process (gcore)" in bt.stdout and "hang_here" in bt.stdout
    finally:
        for core in cores:
            core.unlink()


def test_abort_kills_with_sigabrt_and_the_kernel_writes_the_core(crashes: Crashes) -> None:
    script = crashes.directory / "hang.py"
    script.write_text(HANG)
    proc = subprocess.Popen([real_python(), str(script)], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        result = run_cli("core", "grab", str(proc.pid), "--abort")
        assert result.returncode == 0, result.stdout + result.stderr
        assert proc.wait(30) == -signal.SIGABRT
        assert "aborted (SIGABRT)" in result.stdout
        core = crashes.directory / f"core.{proc.pid}"  # ulimit -c was 0: rankscope raised it first
        for _ in range(100):
            if core.exists():
                break
            import time

            time.sleep(0.05)
        assert read_notes(str(core)).signal_name == "SIGABRT"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


#: A process that another tracer holds (its parent, through PTRACE_TRACEME): gdb cannot attach to it.
TRACED = """
import ctypes, time
ctypes.CDLL(None).ptrace(0, 0, None, None)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.needs("gdb")
def test_a_process_gdb_cannot_attach_to_fails_with_gdbs_reason(tmp_path: Path) -> None:
    proc = subprocess.Popen([real_python(), "-c", TRACED], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        out = tmp_path / "cores"
        result = run_cli("core", "grab", str(proc.pid), "--dir", str(out))
        assert result.returncode == 5, result.stdout + result.stderr  # every core failed
        assert (
            f"pid {proc.pid}: FAILED: gcore wrote no core: ptrace: Operation not permitted." in result.stdout
        )
        assert list(out.iterdir()) == [] and proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_grab_needs_pids_or_job_and_real_pids() -> None:
    assert run_cli("core", "grab").returncode == 2
    missing = run_cli("core", "grab", "999999")
    assert missing.returncode == 8 and "no such process: 999999" in missing.stderr


def test_space_needed_is_the_mapped_memory_with_a_margin() -> None:
    assert needed_bytes([Target(1, "a", 1000), Target(2, "b", 3000)]) == int(4000 * SPACE_MARGIN)


@pytest.mark.needs("gdb")
@pytest.mark.needs("pidns")
def test_grab_job_takes_every_rank_of_a_hung_torchrun_job(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (util-linux) for a PID namespace")
    from rankscope.ranks import short_hostname

    # The job and the grab share a PID namespace of their own: --job finds this job and no other.
    out = tmp_path / "cores"
    driver = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            str(GRAB_JOB),
            str(tmp_path),
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = driver.communicate(timeout=280)
        assert driver.returncode == 0, stderr
        result = json.loads(stdout)
        assert result["returncode"] == 0, result["stdout"] + result["stderr"]
        host = short_hostname()
        assert f"{host}:0 (pid" in result["stdout"] and f"{host}:1 (pid" in result["stdout"]
        cores = sorted(map(str, out.iterdir()))
        assert cores == sorted(str(out / f"core.{pid}") for pid in result["pids"])
        bt = run_cli("core", "bt", *cores, timeout=300)
        assert bt.returncode == 0, bt.stderr
        assert "rank 0" in bt.stdout and "rank 1" in bt.stdout  # the culprit's stack differs from rank 0's
        assert "load_batch" in bt.stdout  # rank 1's Python frame, via pystack
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)  # unshare's child is the namespace's init: all go
            driver.wait()
        for core in out.glob("core.*"):
            core.unlink()


@pytest.mark.needs("gdb")
def test_too_little_space_is_refused_before_any_process_is_touched(
    hung: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    with machine_lock("mount"):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
        try:
            result = run_cli("core", "grab", str(hung.pid), "--dir", str(small))
            assert result.returncode == 8, result.stdout + result.stderr
            assert "GB free, the cores need about" in result.stderr and "--no-space-check" in result.stderr
            assert list(small.iterdir()) == []
            assert hung.poll() is None
        finally:
            subprocess.run(["umount", str(small)], check=True)
