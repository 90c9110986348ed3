from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import psutil
import pytest

pytest_plugins = ["tests.support.tools", "tests.support.cluster_fixtures"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A run that collected no tests must fail, not pass quietly.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    """Safety net: kill (by process group) anything a test started and left running."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    for proc in me.children(recursive=True):
        if proc.pid in before:
            continue
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(proc.pid, signal.SIGKILL)
