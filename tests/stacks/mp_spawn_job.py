"""A job started the way the DDP tutorials start one: ``torch.multiprocessing.spawn``, no launcher, no
rank in any environment (each rank sets MASTER_ADDR/PORT in its own code). Rank CULPRIT sleeps in its
own code; the others wait in all_reduce. With ``plain``, no torch: a spawn Pool of plain Python
processes (not a job). With RANKSCOPE_READY_DIR set, each rank touches ``ready.<rank>`` there once
its process group is up, right before it hangs (as rankscope/demo/hang_job.py does).

    python mp_spawn_job.py PORT NPROCS CULPRIT | python mp_spawn_job.py plain
"""

import os
import sys
import time
from pathlib import Path


def mark_ready(rank):
    ready_dir = os.environ.get("RANKSCOPE_READY_DIR")
    if ready_dir:
        Path(ready_dir, f"ready.{rank}").touch()


def stay_here():
    time.sleep(3600)


def rank_main(rank, world, port, culprit):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mark_ready(rank)
    if rank == culprit:
        stay_here()
    dist.all_reduce(torch.ones(2))
    time.sleep(3600)


def plain_main(_index):
    time.sleep(3600)


if __name__ == "__main__":
    if sys.argv[1] == "plain":
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        procs = [context.Process(target=plain_main, args=(i,)) for i in range(2)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
    else:
        import torch.multiprocessing as mp

        port, nprocs, culprit = (int(a) for a in sys.argv[1:4])
        mp.spawn(rank_main, args=(nprocs, port, culprit), nprocs=nprocs)
