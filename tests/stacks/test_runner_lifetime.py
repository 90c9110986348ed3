"""`rankscope stacks` killed while its py-spy dumps run: every py-spy carries the run's token (what
the guardian goes by), none is left afterwards, and the target is not left stopped."""

from __future__ import annotations

import os
import signal
import subprocess

from tests.support.leftovers import carrying, rankscope_marked, state, wait_for, wait_gone

from rankscope import procfs
from rankscope.lifetime import STARTED_BY


def test_stacks_killed_mid_dumps_leaves_no_py_spy_and_the_target_running(
    python_sleeper: subprocess.Popen[bytes],
) -> None:
    argv = ["stacks", "--pid", str(python_sleeper.pid), "--samples", "1000", "--interval", "0"]
    with rankscope_marked(*argv) as (rankscope, mark):
        tokens: list[str] = []

        def a_dump_read() -> bool:  # the environment of a py-spy that ran long enough to be read
            for pid, name in carrying(mark):
                entry = procfs.process(pid)
                environ = entry.environ if entry is not None and name == "py-spy" else None
                if environ is not None:
                    tokens.append(environ.get(STARTED_BY, "none"))
            return bool(tokens)

        wait_for(a_dump_read, 60, "a py-spy dump")
        assert tokens[0].startswith(f"{rankscope.pid}."), tokens
        os.kill(rankscope.pid, signal.SIGKILL)
        rankscope.wait(30)
        assert wait_gone(mark) == [], "left running after rankscope died"
        assert state(python_sleeper.pid) in ("S", "R")
