"""One gloo all_reduce: enough for init_process_group to pick its network interface."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
print("sum", total.item())
dist.destroy_process_group()
