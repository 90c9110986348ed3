"""A real gloo job whose rank 2 builds a different model than the others: DDP's check of the model
when it wraps it fails on every rank, each naming one rank whose parameter count differs from its own.

Usage: torchrun --nproc-per-node 3 ddp_model_job.py
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
layers = [torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)]
if rank == 2:
    layers.insert(1, torch.nn.LayerNorm(8))
model = DDP(torch.nn.Sequential(*layers))
