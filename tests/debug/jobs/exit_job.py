"""A 2-rank job that stops rank 1 in pdb before the process group exists (torchrun's store) and
after (the group's store), and shuts down as torch's documentation asks (destroy_process_group():
without it a gloo job aborts at exit now and then, with or without rankscope; see docs/debug.md)."""

import os
import sys

import torch
import torch.distributed as dist

import rankscope

rank = int(os.environ["RANK"])
rankscope.breakpoint(rank=1)
dist.init_process_group("gloo")
rankscope.breakpoint(rank=1)
value = torch.tensor([rank + 1])
dist.all_reduce(value)
sys.stdout.write(f"rank {rank} done, sum={int(value)}\n")  # one write: the ranks share a pipe
dist.destroy_process_group()
