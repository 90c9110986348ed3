"""A job that used rankscope.breakpoint() ends as it would have without it, and the waiting ranks
say nothing in its log: a real 2-rank torchrun job (gloo) without a terminal, run three times (five
until 2026-11-26; no abort at exit has been seen since the job destroys its process group). Rank 1
stops before the process group exists (torchrun's store) and after (the group's store); the test
attaches, lets rank 0 wait a while, and continues.

The job calls destroy_process_group() at its end. Without it, a gloo job aborts at exit now and
then ("terminate called without an active exception") with or without rankscope: torch's own
behaviour, measured in docs/debug.md, so a test of that shape could not tell rankscope's fault."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from tests.debug.conftest import TORCHRUN, Terminal, job_env

from rankscope.demo.launch import kill_tree

JOB = Path(__file__).parent / "jobs" / "exit_job.py"
STOPPED = re.compile(
    r"^rankscope: rank 1 \(pid (\d+) on \S+\) is stopped in pdb with no terminal; "
    r"attach on \S+ with: rankscope attach --pid \d+$",
    re.MULTILINE,
)
RELAYED = re.compile(r"^rankscope: rank 0 waits; rank 1 \(pid \d+ on \S+\) is stopped in pdb", re.MULTILINE)
#: Seconds rank 0 waits at each breakpoint before the test continues: the old timed store waits
#: logged torch's "timed out" warning twice a second, so a second shows them again.
HOLD = 1.0


def _read_until(job: subprocess.Popen[bytes], seen: list[str], count: int) -> str:
    """Read the job's output until rank 1 has announced ``count`` stops; the pid of the last."""
    assert job.stdout is not None
    deadline = time.monotonic() + 120
    while len(found := STOPPED.findall("".join(seen))) < count:
        ready, _, _ = select.select([job.stdout], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(job.stdout.fileno(), 65536) if ready else b""
        if not chunk:
            raise AssertionError("rank 1 never stopped; the job printed:\n" + "".join(seen))
        seen.append(chunk.decode("utf-8", "replace"))
    return str(found[-1])


@pytest.mark.parametrize("run", range(3))
def test_a_job_that_stopped_at_breakpoints_exits_0_and_waits_silently(
    run: int, terminal: Callable[..., Terminal]
) -> None:
    job = subprocess.Popen(
        [TORCHRUN, "--standalone", "--nproc-per-node=2", str(JOB)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**job_env(), "RANKSCOPE_BREAKPOINT_REMOTE": "1"},
        start_new_session=True,
    )
    seen: list[str] = []
    try:
        for stop in (1, 2):
            pid = _read_until(job, seen, stop)
            client = terminal([sys.executable, "-m", "rankscope", "attach", "--pid", pid], job_env())
            client.expect("(Pdb rank 1) ")
            time.sleep(HOLD)  # rank 0 waits meanwhile
            client.send("c")
            assert client.wait(60) == 0, client.seen
        assert job.stdout is not None
        rest, _ = job.communicate(timeout=120)
        seen.append(rest.decode("utf-8", "replace"))
    finally:
        kill_tree(job, grace=1.0)
    log = "".join(seen)
    assert job.returncode == 0, log
    assert len(STOPPED.findall(log)) == 2 and len(RELAYED.findall(log)) == 2, log
    others = [
        line
        for line in log.splitlines()
        if not (
            STOPPED.match(line) or RELAYED.match(line) or line in ("rank 0 done, sum=3", "rank 1 done, sum=3")
        )
    ]
    assert others == [], log  # no torch warning (socket.cpp ... timed out), no abort at exit
