"""A job started the way PyTorch Lightning's DDP starts one (``python train.py``, no launcher): this
script is local rank 0, sets MASTER_ADDR/PORT, NODE_RANK, LOCAL_RANK and WORLD_SIZE in its own
environment at run time and runs itself again once per other local rank with LOCAL_RANK=i; no RANK
variable anywhere. Rank CULPRIT sleeps in its own code; the others wait in all_reduce. With
RANKSCOPE_READY_DIR set, each rank touches ``ready.<rank>`` there right before it hangs (mp_spawn_job.py).

    python relaunch_job.py PORT NPROCS CULPRIT
"""

import os
import subprocess
import sys
import time
from pathlib import Path


def stay_here():
    time.sleep(3600)


def main():
    port, nprocs, culprit = (int(a) for a in sys.argv[1:4])
    if "LOCAL_RANK" not in os.environ:  # the script as the user ran it: local rank 0, starts the others
        os.environ.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            NODE_RANK="0",
            LOCAL_RANK="0",
            WORLD_SIZE=str(nprocs),
        )
        for local in range(1, nprocs):
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), *sys.argv[1:]],
                env={**os.environ, "LOCAL_RANK": str(local)},
            )
    import torch
    import torch.distributed as dist

    rank = int(os.environ["NODE_RANK"]) * nprocs + int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    if os.environ.get("RANKSCOPE_READY_DIR"):
        Path(os.environ["RANKSCOPE_READY_DIR"], f"ready.{rank}").touch()
    if rank == culprit:
        stay_here()
    dist.all_reduce(torch.ones(2))
    time.sleep(3600)


main()
