"""A real gloo job whose torch.distributed.checkpoint save fails on one rank.

Usage: torchrun --nproc-per-node 3 dcp_save_job.py CHECKPOINT_DIR

The test makes ``CHECKPOINT_DIR/__1_0.distcp`` (the file rank 1 writes) a directory, so rank 1's
write step fails with IsADirectoryError; DCP gathers the failure and every rank, rank 1 too,
raises one ``CheckpointException`` whose message quotes rank 1's traceback under ``(RANK 1)``.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def main() -> None:
    dist.init_process_group("gloo")
    state = {"weight": torch.ones(4) * dist.get_rank()}
    dcp.save(state, checkpoint_id=sys.argv[1])


if __name__ == "__main__":
    main()
