"""A torch.multiprocessing.spawn job (the DDP tutorials' way: no launcher, no RANK variable in the
children) on gloo: rank 1 stops in its data loading after a few steps while rank 0 waits for it in
an all_reduce (a hang); with ``raise``, rank 1 raises there instead while rank 0 sleeps before that
all_reduce (mp.spawn then ends rank 0 and raises rank 1's error in the parent). Rank 0 sleeps so
that its own error cannot come first: waiting in the all_reduce it fails too ("Connection closed by
peer") and mp.spawn relays whichever failed process it looks at first, so the output may hold only
rank 0's error (seen in CI).

Usage: python spawn_job.py PORT [raise]
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def read_shard_forever() -> None:
    while True:
        time.sleep(0.2)


def run(rank: int, world: int, port: str, fail: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for step in range(1000):
        if fail and rank == 0 and step == 4:
            time.sleep(5)
        if rank == 1 and step == 4:
            if fail:
                raise ValueError(f"bad record in shard 3 at step {step}")
            read_shard_forever()
        tensor = torch.ones(4)
        dist.all_reduce(tensor)
        time.sleep(0.5)
        print(f"rank {rank} step {step}", flush=True)


if __name__ == "__main__":
    mp.spawn(run, args=(2, sys.argv[1], sys.argv[2:] == ["raise"]), nprocs=2)
