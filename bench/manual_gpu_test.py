"""The hand-written test script rankscope gpu-test replaces: init, all_reduce, barrier, print.

No timeout of its own (the process group's default applies), no check of the sum, no summary.
"""

import os
import socket

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
backend = "nccl" if torch.cuda.is_available() else "gloo"
device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(device)
dist.init_process_group(backend)
rank = dist.get_rank()
tensor = torch.ones(1 << 20, device=device)
dist.all_reduce(tensor)
dist.barrier()
print(f"{socket.gethostname()}-{rank} is OK (global rank: {rank}/{dist.get_world_size()})", flush=True)
dist.destroy_process_group()
