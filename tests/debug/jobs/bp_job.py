"""A 2-rank job that stops rank 1 in pdb: before torch is imported (``--early``: the ranks meet
through a file), before the process group exists (torchrun's store), and after (the group's store)."""

import os
import sys
from datetime import timedelta

import rankscope

rank = int(os.environ["RANK"])
if sys.argv[1:] == ["--early"]:
    rankscope.breakpoint(rank=1)
    step = rank + 100
    print(f"rank {rank} passed the first breakpoint, step={step}", flush=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if sys.argv[1:] == ["--early"]:
    rankscope.breakpoint(rank=1)
    print(f"rank {rank} passed the second breakpoint", flush=True)

dist.init_process_group("gloo", timeout=timedelta(seconds=5))
rankscope.breakpoint(rank=1)  # the session outlasts the group's 5 s timeout
value = torch.tensor([rank + 1])
dist.all_reduce(value)
print(f"rank {rank} done, sum={int(value)}", flush=True)
dist.destroy_process_group()
