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


#: The slowest files (docs/testing.md, "Time"), handed to the pytest-xdist workers first: with a file per
#: worker (`--dist loadfile`), a slow file taken last keeps one worker busy while the other is idle.
SLOWEST_FIRST = (
    "gputest/test_gputest_real.py",
    "launch/test_real_launchers.py",
    "logs/test_messy_logs.py",
    "logs/test_logs_two_nodes.py",
    "logs/test_logs_torchrun.py",
    "stacks/test_real_jobs.py",
    "watch/test_watch_jobs.py",
    "logs/test_streaming_memory.py",
    "core/test_grab.py",
    "trace/test_readers.py",
    "trace/test_hostile_files.py",
    "inproc/test_churn.py",
    "debug/test_breakpoint_exit.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    rank = {os.path.join(here, name): index for index, name in enumerate(SLOWEST_FIRST)}
    # A stable sort: the other files, and the tests within each file, keep their order.
    items.sort(key=lambda item: rank.get(str(item.path), len(SLOWEST_FIRST)))
