"""A real core lost: core_pattern=core, core_uses_pid=0, two ranks crash in one directory, one core is left.

kernel.core_pattern and core_uses_pid are machine-wide: both are set under ``machine_lock("core-pattern")``
and put back afterwards.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core.conftest import CRASH, real_python
from tests.support.cli import run_cli
from tests.support.machine_lock import machine_lock

KERNEL = Path("/proc/sys/kernel")


@pytest.fixture
def shared_core_pattern() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("setting kernel.core_pattern needs root")
    with machine_lock("core-pattern"):
        saved = {name: (KERNEL / name).read_text() for name in ("core_pattern", "core_uses_pid")}
        (KERNEL / "core_pattern").write_text("core\n")
        (KERNEL / "core_uses_pid").write_text("0\n")
        try:
            yield
        finally:
            for name, value in saved.items():
                (KERNEL / name).write_text(value)


def _unlimited() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def test_two_ranks_crash_in_one_directory_one_core_survives_and_both_checks_warn(
    shared_core_pattern: None, tmp_path: Path
) -> None:
    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    pids = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2"}
        proc = subprocess.Popen(
            [real_python(), str(script)], cwd=tmp_path, env=env, preexec_fn=_unlimited, start_new_session=True
        )
        assert proc.wait(timeout=60) == -signal.SIGSEGV
        pids.append(proc.pid)
    for _ in range(100):  # the kernel finishes writing after the parent sees the exit
        if (tmp_path / "core").exists():
            break
        time.sleep(0.05)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["core", "crash.py"]  # two crashes, one core

    check = subprocess.run(
        [sys.executable, "-m", "rankscope", "core", "check", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        preexec_fn=_unlimited,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    document = json.loads(check.stdout)
    assert any("only the last core survives" in problem for problem in document["problems"])

    doctor = run_cli("doctor", "--json")
    found = [c for c in doctor.json()["checks"] if c["name"] == "core-dumps"]
    assert found and found[0]["status"] == "WARN" and "kernel.core_uses_pid=1" in found[0]["fix"]

    listed = run_cli("core", "list", str(tmp_path), "--json")
    assert listed.returncode == 0, listed.stderr
    (core,) = listed.json()["cores"]
    assert core["pid"] == pids[1] and core["rank"] == "1"  # the last rank to crash wrote the survivor
    assert "cores of ranks that crashed here before it were overwritten" in core["note"]
    assert "were overwritten" in run_cli("core", "list", str(tmp_path)).stdout


def test_overwritten_is_said_only_for_a_shared_name_of_a_job_of_several_ranks() -> None:
    from rankscope.core.listing import overwritten

    job = {"WORLD_SIZE": "4"}
    assert overwritten("core", 41, "3", job) is not None and "rank 3 (pid 41)" in str(
        overwritten("core", 41, "3", job)
    )
    assert overwritten("core.41", 41, "3", job) is None  # its own pid in the name: no other rank writes it
    assert overwritten("core", 41, None, {"WORLD_SIZE": "1"}) is None  # a lone process
    assert overwritten("core", 41, None, {}) is None  # not a job
    assert overwritten("core", None, "0", job) is None
