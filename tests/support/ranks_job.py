"""A hung gloo job of tests/fr/fr_job.py started rank by rank, no launcher (each rank its own process group).

:func:`ranks_job` is the builder: the tests of tests/fr and tests/why share one per module."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Optional

from tests.support.sshd import free_port

from rankscope.inproc.runtime import ENV_DIR
from rankscope.stacks.inproc_request import locate

JOB = Path(__file__).parent.parent / "fr" / "fr_job.py"


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


@contextlib.contextmanager
def ranks_job(
    runtime: Optional[Path],
    scenario: str,
    world: int,
    without_handler: Collection[int] = (),
    dumps: Optional[Path] = None,
    dump_after: float = 5,
) -> Iterator[list[int]]:
    """The pids of a ``fr_job.py SCENARIO`` job run as a user would, TORCH_FR_BUFFER_SIZE=2000 and
    RANKSCOPE_INPROC=1 (no dump code), once every handler is enabled; the ranks in ``without_handler``
    run with RANKSCOPE_INPROC=0. The handlers' files go under ``runtime``, private to the test; with
    ``runtime`` None no rank runs a handler (RANKSCOPE_INPROC unset). With ``dumps``, each rank also
    writes its recorder there (``rank_N``) ``dump_after`` seconds after its start, once hung, and the
    job is handed over once every rank's is there. Every rank is SIGKILLed, whole group, on exit."""
    if runtime is None:
        without_handler = range(world)
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(world):
            env = {"TORCH_FR_BUFFER_SIZE": "2000"}
            if runtime is not None:
                env["RANKSCOPE_INPROC"] = "0" if rank in without_handler else "1"
                env[ENV_DIR] = str(runtime / "rt")
            args = (
                [scenario, str(dumps / "rank_"), f"{dump_after:g}"]
                if dumps is not None
                else [scenario, "-", "0"]
            )
            procs.append(start_rank(rank, world, port, args, env))
        deadline = time.monotonic() + 240  # torch's import on a loaded machine
        while not all(
            "inproc" in locate(p.pid)[2] for i, p in enumerate(procs) if i not in without_handler
        ) or (dumps is not None and not all((dumps / f"rank_{r}").exists() for r in range(world))):
            assert all(p.poll() is None for p in procs), "a rank of the job ended"
            assert time.monotonic() < deadline, "the ranks never enabled their handlers"
            time.sleep(0.2)
        yield [p.pid for p in procs]
    finally:
        stop_ranks(procs)
