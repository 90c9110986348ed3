"""Real torchrun jobs for tests (gloo, CPU): started, waited for, and always stopped, whole tree.

:func:`torchrun_job` is the one way a test or fixture holds a hung job of
``rankscope/demo/hang_job.py`` (or another script): a fixture shares it between the tests of a
module, or of a worker (session scope) when no test changes it::

    @pytest.fixture(scope="module")
    def lock_job(tmp_path_factory):
        with torchrun_job(tmp_path_factory.mktemp("lock"), "--scenario", "lock", "--culprit", "1") as job:
            yield job

:func:`run_torchrun` runs a job that ends by itself (a crash, a finished run) and gives its exit code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Optional

import pytest

from rankscope.demo.launch import HANG_JOB, LaunchedJob, start_torchrun

#: How long the ranks of a job may take to reach their hang point (torch's import on a loaded machine).
READY_TIMEOUT = 180.0


@contextlib.contextmanager
def torchrun_job(
    workdir: Path,
    *script_args: str,
    nproc: int = 2,
    script: Path = HANG_JOB,
    env: Optional[Mapping[str, str]] = None,
    torchrun_args: Sequence[str] = (),
    launcher: Optional[Sequence[str]] = None,
    ready: bool = True,
) -> Iterator[LaunchedJob]:
    """``torchrun --nproc-per-node NPROC SCRIPT SCRIPT_ARGS`` in ``workdir`` (its log: ``job.log``).

    With ``ready``, entered once every rank reached its hang point (``wait_ready``); else at once,
    for a caller that starts several jobs before it waits for them. Stopped on exit, whatever
    happened (skipped where torch.distributed cannot be imported).
    """
    pytest.importorskip("torch.distributed")
    job = start_torchrun(
        script,
        nproc=nproc,
        script_args=script_args,
        workdir=workdir,
        env=None if env is None else dict(env),
        torchrun_args=torchrun_args,
        launcher=launcher,
    )
    try:
        if ready:
            job.wait_ready(timeout=READY_TIMEOUT)
        yield job
    finally:
        job.stop()


def run_torchrun(
    workdir: Path,
    log: Path,
    *script_args: str,
    script: Path,
    timeout: float,
    nproc: int = 2,
    env: Optional[Mapping[str, str]] = None,
    torchrun_args: Sequence[str] = (),
) -> int:
    """Run a job that ends by itself to its end: torchrun's exit code, its whole output in ``log``.

    A job still running after ``timeout`` seconds raises :class:`subprocess.TimeoutExpired`; it is
    stopped, whole tree, either way.
    """
    with open(log, "wb") as out:
        job = start_torchrun(
            script,
            nproc=nproc,
            script_args=script_args,
            workdir=workdir,
            torchrun_args=torchrun_args,
            env=None if env is None else dict(env),
            stdout=out,
        )
        try:
            return job.process.wait(timeout)
        finally:
            job.stop()
