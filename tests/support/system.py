"""The real system tools the tests use: which commands each one brings, and its installer.

A test names the tools it runs with ``@pytest.mark.needs("pdsh", ...)`` (names: the keys of
:data:`TOOLS`); tests/support/tools.py installs them before the test and hides every other one
from it. The fixtures that start a tool install it too (:func:`ensure_tools`), so they also work
on their own. Installing is ``apt-get`` as root, under a file lock, ``apt-get update`` once per run
(per process: each pytest-xdist worker updates before its first install).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Optional

import pytest
from tests.support.machine_lock import machine_lock

_updated = False

#: Tool name -> {command it provides: the Debian package that installs that command}.
#: A command may belong to several tools (pdsh runs ssh).
TOOLS: dict[str, dict[str, str]] = {
    "ssh": {
        "ssh": "openssh-client",
        "ssh-keygen": "openssh-client",
        "ssh-keyscan": "openssh-client",
        "sshd": "openssh-server",
    },
    "pdsh": {"pdsh": "pdsh", "ssh": "openssh-client"},
    "slurm": {
        "slurmctld": "slurmctld",
        "slurmd": "slurmd",
        "sbatch": "slurm-client",
        "srun": "slurm-client",
        "squeue": "slurm-client",
        "scancel": "slurm-client",
        "sinfo": "slurm-client",
        "scontrol": "slurm-client",
        "munged": "munge",
    },
    "openmpi": {"mpirun": "openmpi-bin", "mpiexec": "openmpi-bin"},
    "netns": {"ip": "iproute2", "iptables": "iptables"},
    "gdb": {"gdb": "gdb", "gcore": "gdb"},
    "strace": {"strace": "strace"},
    "time": {"time": "time"},
    "users": {"useradd": "passwd"},
    "gcc": {"gcc": "gcc"},
    "pidns": {"unshare": "util-linux", "nsenter": "util-linux"},
    "chromium": {"chromium": "chromium"},
}

#: The directory of stand-ins that hide undeclared tools (set by tests/support/tools.py).
GUARD_ENV = "RANKSCOPE_TEST_TOOL_GUARD"


def real_path(path: Optional[str] = None) -> str:
    """``PATH`` without the directory that hides undeclared tools."""
    guard = os.environ.get(GUARD_ENV)
    entries = (os.environ.get("PATH", "") if path is None else path).split(os.pathsep)
    return os.pathsep.join(entry for entry in entries if entry and entry != guard)


def which(command: str) -> Optional[str]:
    """Where ``command`` really is (never a stand-in that hides it)."""
    return shutil.which(command, path=real_path())


def ensure_tools(*names: str) -> None:
    """Install the tools ``names`` (keys of :data:`TOOLS`) unless every command is there."""
    unknown = sorted(set(names) - set(TOOLS))
    if unknown:
        raise ValueError(f"unknown system tools {unknown}; known: {sorted(TOOLS)}")
    packages: dict[str, str] = {}
    for name in names:
        packages.update(TOOLS[name])
    ensure_commands(packages)


def ensure_commands(packages: dict[str, str]) -> None:
    """Make sure each command exists, installing its Debian package if not.

    ``packages`` maps a command name to the package that provides it. Without root (or
    apt-get) the calling test is skipped with the reason, never silently passed.
    """
    missing = {cmd: pkg for cmd, pkg in packages.items() if which(cmd) is None}
    if not missing:
        return
    if os.geteuid() != 0 or which("apt-get") is None:
        pytest.skip(f"needs {', '.join(sorted(missing))}: install {' '.join(sorted(set(missing.values())))}")
    global _updated
    with machine_lock("apt"):  # /tmp/rankscope-tests-apt.lock
        still = sorted({pkg for cmd, pkg in missing.items() if which(cmd) is None})
        if still:
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", PATH=real_path())
            if not _updated:
                _apt(["update", "-q"], env)
                _updated = True
            _apt(["install", "-y", "-q", "--no-install-recommends", *still], env)
    absent = [cmd for cmd in packages if which(cmd) is None]
    if absent:
        pytest.fail(f"installed {sorted(set(missing.values()))} but still missing: {absent}")


def _apt(args: list[str], env: dict[str, str]) -> None:
    # Wait for another apt/dpkg run (another test session) instead of failing on its lock.
    argv = ["apt-get", "-o", "DPkg::Lock::Timeout=600", *args]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {result.returncode}: {result.stderr[-2000:]}")
