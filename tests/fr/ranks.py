"""Starting and stopping the ranks of tests/fr/fr_job.py (each rank its own process group)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

JOB = Path(__file__).with_name("fr_job.py")


def start_rank(
    rank: int, world: int, port: int, args: Sequence[str], env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """One rank of ``fr_job.py ARGS`` with the rendezvous variables set, in a new session."""
    full = dict(
        os.environ,
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        **env,
    )
    return subprocess.Popen(
        [sys.executable, str(JOB), *args],
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # each rank its own group, killed whole by stop_ranks
    )


def stop_ranks(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in procs:
        proc.wait(timeout=30)
