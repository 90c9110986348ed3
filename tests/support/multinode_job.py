"""A real multi-node torchrun job on one machine: one torchrun per "node", joined over 127.0.0.1.

Each node's torchrun runs with ``SLURMD_NODENAME=<node>`` so rankscope labels its ranks with
that node (as on a SLURM cluster), and writes its pid to ``<workdir>/<node>.pid`` so a
per-node stand-in for the remote rankscope (:func:`write_node_dispatch`) can find it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tests.support.sshd import free_port

from rankscope.demo.launch import HANG_JOB, LaunchedJob

REMOTE_RANKSCOPE = Path(sys.executable).with_name("rankscope")


@dataclass
class MultiNodeJob:
    workdir: Path
    nodes: list[str]
    jobs: list[LaunchedJob]
    nproc_per_node: int

    @property
    def world_size(self) -> int:
        return len(self.nodes) * self.nproc_per_node

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while len(list(self.workdir.glob("ready.*"))) < self.world_size:
            for job in self.jobs:
                job.worker_pids()
                if job.process.poll() is not None:
                    raise RuntimeError(f"a node's torchrun exited early: {job.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"ranks not ready: {sorted(p.name for p in self.workdir.glob('ready.*'))}")
            time.sleep(0.1)
        for job in self.jobs:
            job.worker_pids()
        time.sleep(0.5)

    def stop(self) -> None:
        for job in self.jobs:
            with contextlib.suppress(Exception):
                job.stop()


@contextlib.contextmanager
def multinode_job(
    workdir: Path,
    nodes: Sequence[str],
    nproc_per_node: int = 2,
    scenario: str = "lock",
    culprit: int = 2,
    extra_env: Optional[Mapping[str, str]] = None,
    collective_timeout: Optional[float] = None,
    wrap: Sequence[str] = (),
) -> Iterator[MultiNodeJob]:
    """One torchrun per node of ``nodes`` (NPROC_PER_NODE ranks each) of ``hang_job.py --scenario
    SCENARIO --culprit CULPRIT``, entered once every rank is ready, stopped on exit whatever happened.
    ``wrap``: words before each torchrun's command line (``unshare --pid ...``: a node of its own)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    jobs: list[LaunchedJob] = []
    job = MultiNodeJob(workdir=workdir, nodes=list(nodes), jobs=jobs, nproc_per_node=nproc_per_node)
    try:
        for node_rank, node in enumerate(nodes):
            env = dict(
                os.environ, SLURMD_NODENAME=node, RANKSCOPE_READY_DIR=str(workdir), OMP_NUM_THREADS="1"
            )
            env.update(extra_env or {})
            log_path = workdir / f"{node}.log"
            argv = [
                *wrap, sys.executable, "-m", "torch.distributed.run",
                f"--nnodes={len(nodes)}", f"--node-rank={node_rank}", f"--nproc-per-node={nproc_per_node}",
                "--master-addr=127.0.0.1", f"--master-port={port}",
                str(HANG_JOB), "--scenario", scenario, "--culprit", str(culprit),
            ]  # fmt: skip
            if collective_timeout is not None:
                argv += ["--timeout", str(collective_timeout)]
            with open(log_path, "wb") as log:
                process = subprocess.Popen(
                    argv, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            jobs.append(
                LaunchedJob(process=process, workdir=workdir, nproc=nproc_per_node, log_path=log_path)
            )
            (workdir / f"{node}.pid").write_text(str(process.pid))
        job.wait_ready()
        yield job
    finally:
        job.stop()


def write_node_dispatch(
    path: Path, pid_dir: Path, missing: Sequence[str] = (), empty: Sequence[str] = ()
) -> Path:
    """A stand-in "remote rankscope" that makes one machine look like many nodes.

    It runs this install's rankscope with ``--pid`` of the job of ``$RANKSCOPE_NODE`` (set per
    ssh alias). Nodes in ``missing`` have no rankscope (exit 127); nodes in ``empty`` run it in
    a fresh pid namespace, where no job is visible.
    """
    lines = ["#!/bin/sh", 'case "$RANKSCOPE_NODE" in']
    for node in missing:
        lines.append(f'  {node}) exec /nonexistent/bin/rankscope "$@" ;;')
    for node in empty:
        lines.append(f'  {node}) exec unshare --pid --fork --mount-proc {REMOTE_RANKSCOPE} "$@" ;;')
    lines += [
        "esac",
        f'exec {REMOTE_RANKSCOPE} "$@" --pid "$(cat {pid_dir}/"$RANKSCOPE_NODE".pid)"',
        "",
    ]
    path.write_text("\n".join(lines))
    path.chmod(0o755)
    return path
