"""A real gloo job in which one rank's own error makes the others lose their peer.

Usage: torchrun --nproc-per-node 3 peer_loss_job.py

Rank 2 logs a caught exception (``logging.exception``) and trains on for 150 lines; rank 1
raises a ValueError in its own code; ranks 0 and 2 wait in an all_reduce for rank 1 and fail
with gloo's "Connection closed by peer" (or "reset by peer") when its process exits.
"""

from __future__ import annotations

import logging
import time

import torch
import torch.distributed as dist


def read_labels(rank: int) -> list[int]:
    labels = [3, 1, 1000]
    if max(labels) >= 100:
        raise ValueError(f"label {max(labels)} out of range for 100 classes on rank {rank}")
    return labels


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    if rank == 2:
        try:
            int("not a number")
        except ValueError:
            logging.exception("skipping a bad sample")
        for step in range(150):
            logging.info("step %d loss %.3f", step, 1.0 / (step + 1))
    if rank == 1:
        time.sleep(1.0)  # the others are waiting in the all_reduce when this rank dies
        read_labels(rank)
    tensor = torch.ones(1)
    dist.all_reduce(tensor)


if __name__ == "__main__":
    main()
