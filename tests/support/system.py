"""Install and find the real system tools the tests use (apt-get as root, once per run)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

_LOCK = Path("/tmp/rankscope-tests-apt.lock")
_updated = False


def ensure_commands(packages: dict[str, str]) -> None:
    """Make sure each command exists, installing its Debian package if not.

    ``packages`` maps a command name to the package that provides it. Without root (or
    apt-get) the calling test is skipped with the reason, never silently passed.
    """
    missing = {cmd: pkg for cmd, pkg in packages.items() if shutil.which(cmd) is None}
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"needs {', '.join(sorted(missing))}: install {' '.join(sorted(set(missing.values())))}")
    global _updated
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        still = sorted({pkg for cmd, pkg in missing.items() if shutil.which(cmd) is None})
        if still:
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            if not _updated:
                subprocess.run(
                    ["apt-get", "update", "-q"], check=True, env=env, capture_output=True, timeout=600
                )
                _updated = True
            subprocess.run(
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *still],
                check=True,
                env=env,
                capture_output=True,
                timeout=900,
            )
    absent = [cmd for cmd in packages if shutil.which(cmd) is None]
    if absent:
        pytest.fail(f"installed {sorted(set(missing.values()))} but still missing: {absent}")
