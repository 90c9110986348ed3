"""A 2-rank job that stops rank 1 in pdb before the process group exists (torchrun's store) and
after (the group's store), and ends without destroy_process_group(), as many training scripts do."""

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
