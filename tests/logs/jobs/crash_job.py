"""A real gloo job in which every rank crashes: most with one error, one rank with another.

Usage: torchrun --nproc-per-node 8 crash_job.py [--odd-rank 3]

Each rank prints a few ordinary lines, meets the others in a barrier, then raises. An
atexit handler keeps each process alive for a moment after Python printed its traceback, so
that every rank's traceback reaches the log before torchrun tears the job down.
"""

from __future__ import annotations

import argparse
import atexit
import os
import time

import torch
import torch.distributed as dist


def load_batch(rank: int) -> None:
    size = 17 + rank * 3  # differs per rank: the grouping must normalise it
    raise ValueError(f"bad batch size {size} on rank {rank}")


def sync_gradients(rank: int) -> None:
    raise RuntimeError(f"gradient for layer 7 is not finite on rank {rank}")


def train_step(rank: int, odd_rank: int) -> None:
    if rank == odd_rank:
        sync_gradients(rank)
    load_batch(rank)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--odd-rank", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    print(f"rank {rank}: all_reduce gave {tensor.item()}", flush=True)
    dist.barrier()
    atexit.register(time.sleep, float(os.environ.get("CRASH_JOB_LINGER", "3")))
    if rank == args.odd_rank:
        time.sleep(0.2)  # the odd rank fails last: the first failure is not always the odd one
    train_step(rank, args.odd_rank)


if __name__ == "__main__":
    main()
