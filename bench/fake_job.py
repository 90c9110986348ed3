"""A small stand-in for a hung training job: a launcher and N workers with torchrun's rank variables.

Plain Python (no torch), so 32 of them fit on a 2-core machine. Every worker waits in
``barrier()`` except the culprit rank, which is stuck in ``load_batch()``.

    python fake_job.py --node-rank 3 --nproc 2 --nnodes 32 --culprit 5
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time


def barrier() -> None:
    while True:
        time.sleep(0.5)


def wait_for_peers() -> None:
    barrier()


def load_batch() -> None:
    while True:
        time.sleep(0.5)


def train_step(rank: int, culprit: int) -> None:
    if rank == culprit:
        load_batch()
    else:
        wait_for_peers()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--culprit", type=int, default=-1)
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    if args.worker:
        train_step(int(os.environ["RANK"]), args.culprit)
        return
    children = []
    for local_rank in range(args.nproc):
        env = dict(
            os.environ,
            RANK=str(args.node_rank * args.nproc + local_rank),
            LOCAL_RANK=str(local_rank),
            WORLD_SIZE=str(args.nnodes * args.nproc),
            LOCAL_WORLD_SIZE=str(args.nproc),
            GROUP_RANK=str(args.node_rank),
            TORCHELASTIC_RUN_ID="bench",
        )
        argv = [sys.executable, __file__, "--worker", "--culprit", str(args.culprit)]
        children.append(subprocess.Popen(argv, env=env))

    def stop(*_: object) -> None:
        for child in children:
            child.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    for child in children:
        child.wait()


if __name__ == "__main__":
    main()
