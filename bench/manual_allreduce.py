"""A plain torch.distributed timing loop for all_reduce: the baseline of `rankscope bench allreduce`.

    torchrun --nproc-per-node 2 bench/manual_allreduce.py SIZES_BYTES WARMUP ITERS
Rank 0 prints one JSON line: {size: busbw GB/s}, timed on rank 0 alone (what such loops usually do).
"""

import json
import sys
import time

import torch
import torch.distributed as dist

sizes = [int(s) for s in sys.argv[1].split(",")]
warmup, iters = int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
n = dist.get_world_size()
busbw = {}
for size in sizes:
    tensor = torch.ones(size // 4)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    dist.barrier()
    began = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    seconds = (time.perf_counter() - began) / iters
    busbw[size] = size / seconds / 1e9 * 2 * (n - 1) / n
if dist.get_rank() == 0:
    print(json.dumps(busbw), flush=True)
dist.destroy_process_group()
