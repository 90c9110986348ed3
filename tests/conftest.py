from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

import psutil
import pytest
from hypothesis import settings

# Property tests run beside real jobs on two cores: hypothesis's default 200 ms per example is a
# clock assertion the load decides, not the code (a folding test failed once that way).
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

pytest_plugins = ["tests.support.tools", "tests.support.cluster_fixtures"]

# A fresh clone has no bytecode for rankscope or the tests' job scripts. With PYTHONDONTWRITEBYTECODE
# set, every Python process the suite starts (thousands: each `rankscope` command, each rank) would
# compile every module it imports from source again: 0.09 CPU-s more per `rankscope logs` command.
# The suite's processes write it once (`__pycache__/` is ignored by git); the workers inherit this.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# A shell that starts the suite in the background (`cmd &` in a script) ignores SIGINT for it, and an
# ignored signal stays ignored across exec: every rankscope a test starts would then shrug off the
# Ctrl-C the test sends. The suite runs as from a terminal either way (the workers inherit this).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
        # psutil's is_running compares the start time: a pid reaped and reused since is left alone
        with contextlib.suppress(psutil.Error, OSError):
            if proc.is_running() and os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()


#: The costliest files (docs/testing.md, "Time": CPU-seconds of each file alone), handed to the pytest-xdist
#: workers first: with a file per worker (`--dist loadfile`), a slow file taken last keeps one worker busy
#: while the other is idle.
SLOWEST_FIRST = (
    "watch/test_watch_jobs.py",
    "launch/test_watch_slurm.py",
    "gputest/test_gputest_real.py",
    "why/test_jobs.py",
    "launch/test_real_launchers.py",
    "logs/test_logs_torchrun.py",
    "core/test_grab.py",
    "stacks/test_real_jobs.py",
    "stacks/test_jobs_without_launcher.py",
    "watch/test_watch_recorders.py",
    "stacks/test_from.py",
    "test_cli.py",
    "test_quality.py",
    "why/test_ended.py",
    "cluster/test_stacks_ssh.py",
    "stacks/test_via_signal.py",
    "logs/test_streaming_memory.py",
    "rerun/test_rerun_cli.py",
    "logs/test_logs_two_nodes.py",
    "trace/test_readers.py",
    "logs/test_messy_logs.py",
    "trace/test_hostile_files.py",
    "inproc/test_churn.py",
    "debug/test_breakpoint_exit.py",
    "numerics/test_cli.py",
    "fr/test_fr_p2p_live.py",
    "stacks/test_jobs_by_evidence.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    rank = {os.path.join(here, name): index for index, name in enumerate(SLOWEST_FIRST)}
    # A stable sort: the other files, and the tests within each file, keep their order.
    items.sort(key=lambda item: rank.get(str(item.path), len(SLOWEST_FIRST)))
