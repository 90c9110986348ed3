"""`rankscope strace` killed while it traces: strace detached and gone, the target running, no output left."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from tests.fdtrace.conftest import FailingWriter
from tests.support.leftovers import rankscope_marked, state, tracer, wait_for, wait_gone

pytestmark = pytest.mark.needs("strace")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_strace_killed_mid_trace_leaves_the_target_untraced_and_nothing_behind(
    failing_writer: FailingWriter, tmp_path: Path, sig: int
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    argv = ["strace", str(failing_writer.pid), "--seconds", "60"]
    with rankscope_marked(*argv, TMPDIR=str(scratch)) as (rankscope, mark):
        wait_for(lambda: tracer(failing_writer.pid) != 0, 30, "strace to attach")
        time.sleep(1)  # it traces a busy process: its output grows
        assert list(scratch.glob("rankscope-strace-*/*.strace"))
        os.kill(rankscope.pid, sig)
        rankscope.wait(30)
        assert wait_gone(mark) == [], "left running after rankscope died"
        wait_for(lambda: tracer(failing_writer.pid) == 0, 10, "strace to detach")
        assert state(failing_writer.pid) in ("S", "R")
        wait_for(lambda: not list(scratch.iterdir()), 10, "the trace output to be removed")
        if sig == signal.SIGTERM:
            assert rankscope.returncode == 143  # a report of what was traced so far
