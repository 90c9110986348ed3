"""`rankscope doctor` on this machine, for real: its verdicts, its JSON, its exit code, and that it writes nothing."""

from __future__ import annotations

import ctypes.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.machine_lock import machine_lock

WRITES = re.compile(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC")


def _expected_ptrace() -> set[str]:
    """The ptrace verdicts possible for this process's capabilities and kernel.yama.ptrace_scope."""
    capeff = next(
        line.split()[1]
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("CapEff:")
    )
    yama = Path("/proc/sys/kernel/yama/ptrace_scope")
    scope = int(yama.read_text()) if yama.exists() else 0
    if scope == 3:
        return {"FAIL"}
    if int(capeff, 16) & (1 << 19):  # CAP_SYS_PTRACE (root, or granted)
        return {"PASS"}
    return {2: {"FAIL"}, 1: {"WARN"}}.get(scope, {"PASS", "WARN"})  # WARN: scope 0 in a container


def _has_nvidia_driver() -> bool:
    return shutil.which("nvidia-smi") is not None or ctypes.util.find_library("nvidia-ml") is not None


def _has_amd_gpu() -> bool:
    vendors = (path.read_text().strip() for path in Path("/sys/class/drm").glob("*/device/vendor"))
    return Path("/dev/kfd").exists() or "0x1002" in vendors


@pytest.mark.needs("gcc")  # ctypes.util.find_library runs the compiler
def test_doctor_here_agrees_with_its_json() -> None:
    # The core checks read kernel.core_pattern and core_uses_pid, which other tests change for a while.
    with machine_lock("core-pattern"):
        text = run_cli("doctor")
        data = run_cli("doctor", "--json")
    assert data.returncode == text.returncode
    doc = data.json()
    assert doc["schema"] == "rankscope.doctor/1"
    statuses = {check["name"]: check["status"] for check in doc["checks"]}
    assert data.returncode == (10 if "FAIL" in statuses.values() else 0)
    # What this machine is, read here independently of rankscope.
    assert statuses["ptrace"] in _expected_ptrace()
    assert (statuses["nvidia-gpus"] == "SKIP") is not _has_nvidia_driver()
    assert (statuses["amd-iommu"] == "SKIP") is not _has_amd_gpu()
    for check in doc["checks"]:
        assert f"{check['status']:4}  {check['name']}" in text.stdout
        if check["status"] in ("WARN", "FAIL"):
            assert check["fix"] and f"fix: {check['fix']}" in text.stdout


def test_a_failed_check_exits_10_with_its_fix() -> None:
    env = dict(os.environ, GLOO_SOCKET_IFNAME="nosuch0", NCCL_SOCKET_IFNAME="^=lo")
    result = run_cli("doctor", env=env)
    assert result.returncode == 10, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if "GLOO_SOCKET_IFNAME=nosuch0" in line)
    assert line.split()[0] == "FAIL"
    assert "fix: export GLOO_SOCKET_IFNAME=" in result.stdout
    assert re.search(r"PASS +NCCL_SOCKET_IFNAME +NCCL_SOCKET_IFNAME=\^=lo: NCCL may use", result.stdout)


@pytest.mark.needs("strace")
def test_doctor_writes_nothing(tmp_path: Path) -> None:
    """Every file system call of the run (and of nvidia-smi, were it here) is traced: none opens for writing."""
    log = tmp_path / "trace"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    syscalls = "open,openat,openat2,creat,mkdir,mkdirat,unlink,unlinkat,rename,renameat,renameat2,truncate,chmod,fchmodat,link,linkat,symlink,symlinkat"
    result = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-e",
            f"trace={syscalls}",
            "-o",
            str(log),
            sys.executable,
            "-m",
            "rankscope",
            "doctor",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode in (0, 10), result.stderr
    calls = log.read_text().splitlines()
    assert any("/proc/sys/kernel/core_pattern" in call for call in calls)  # the trace saw the doctor read
    changes = [
        c
        for c in calls
        if WRITES.search(c) or re.search(r"\b(mkdir|unlink|rename|truncate|chmod|link|symlink)", c)
    ]
    assert changes == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace"]
