"""Two real unprivileged local users, for tests of what one user can do to another's processes.

``local_users`` creates ``rankscope-u1`` and ``rankscope-u2`` (each with a home and a group of its
own) the first time any test asks, under ``machine_lock("users")``, and
reuses them afterwards: creating is idempotent, and they are never removed (another test run on
the machine may be using them). Needs root: without it the test is skipped.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.machine_lock import machine_lock
from tests.support.system import ensure_tools

NAMES = ("rankscope-u1", "rankscope-u2")


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int
    home: Path

    def argv(self, *command: str) -> list[str]:
        """``command`` run as this user (from root), with no supplementary groups."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *command]

    def popen_kwargs(self, env: Mapping[str, str]) -> dict[str, Any]:
        """``subprocess`` arguments that run a command as this user (no supplementary groups)."""
        return {
            "user": self.uid,
            "group": self.gid,
            "extra_groups": [],
            "cwd": str(self.home),
            "env": {**env, "HOME": str(self.home), "USER": self.name, "LOGNAME": self.name},
        }


def _user(name: str) -> LocalUser:
    entry = pwd.getpwnam(name)
    return LocalUser(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture(scope="session")
def local_users() -> tuple[LocalUser, LocalUser]:
    """Two unprivileged users, created once per machine."""
    if os.geteuid() != 0:
        pytest.skip("creating local users needs root")
    ensure_tools("users")
    with machine_lock("users"):
        for name in NAMES:
            if not _exists(name):
                subprocess.run(
                    ["useradd", "--create-home", "--user-group", "--shell", "/bin/sh", name],
                    check=True,
                    capture_output=True,
                    timeout=60,
                )
    first, second = (_user(name) for name in NAMES)
    return first, second


@pytest.fixture(scope="session")
def job_user(local_users: tuple[LocalUser, LocalUser]) -> LocalUser:
    """The job's owner: the first of :func:`local_users`."""
    return local_users[0]


@pytest.fixture(scope="session")
def other_user(local_users: tuple[LocalUser, LocalUser]) -> LocalUser:
    """A second user who must not get at the job's owner's processes."""
    return local_users[1]
