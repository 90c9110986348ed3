"""Real unprivileged local users for the tests, and the lock for machine-wide state.

``job_user`` / ``other_user`` (pytest fixtures; import them into a test module) are accounts made
with ``useradd`` the first time a test needs them and kept afterwards (creating them again is a
no-op, so concurrent test runs and later ones share them). Creation holds
``/tmp/rankscope-system.lock``, the lock every test that changes machine-wide state holds
(docs/testing.md); :func:`system_lock` takes it for other such changes (mounts, say).
"""

from __future__ import annotations

import fcntl
import os
import pwd
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

SYSTEM_LOCK = "/tmp/rankscope-system.lock"
#: The accounts the tests use: the job's owner, and a second user who must not get at the first's.
JOB_USER = "rsjobuser"
OTHER_USER = "rsotheruser"


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: str

    def argv(self, *command: str) -> list[str]:
        """``command`` run as this user (from root), with no supplementary groups."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *command]


@contextmanager
def system_lock() -> Iterator[None]:
    """Hold the machine-wide lock (waits for another test run that holds it)."""
    fd = os.open(SYSTEM_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_user(name: str) -> User:
    """The local account ``name``, created (with its group and home) if it does not exist yet."""
    if os.geteuid() != 0:
        pytest.skip("creating a local user needs root")
    with system_lock():
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            subprocess.run(
                ["useradd", "--create-home", "--user-group", "--shell", "/bin/sh", name],
                check=True,
                capture_output=True,
                timeout=60,
            )
            entry = pwd.getpwnam(name)
    return User(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


@pytest.fixture(scope="session")
def job_user() -> User:
    return ensure_user(JOB_USER)


@pytest.fixture(scope="session")
def other_user() -> User:
    return ensure_user(OTHER_USER)
