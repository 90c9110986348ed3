"""`rankscope doctor` on this machine, for real: its verdicts, its JSON, its exit code, and that it writes nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli

WRITES = re.compile(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC")


def test_doctor_here_agrees_with_its_json() -> None:
    text = run_cli("doctor")
    data = run_cli("doctor", "--json")
    assert data.returncode == text.returncode
    doc = data.json()
    assert doc["schema"] == "rankscope.doctor/1"
    statuses = {check["name"]: check["status"] for check in doc["checks"]}
    assert data.returncode == (10 if "FAIL" in statuses.values() else 0)
    # What this machine is known to be: root, no GPU, the host name in /etc/hosts only as loopback.
    assert statuses["ptrace"] == "PASS"
    assert statuses["nvidia-gpus"] == "SKIP" and statuses["amd-iommu"] == "SKIP"
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
