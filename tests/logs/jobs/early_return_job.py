"""A 2-node job (one rank per node) whose rank on the node started with EARLY=1 returns from its
main without the last barrier (a step only some ranks run): the other rank's barrier loses its
peer, and the early rank's node saw every worker exit 0. Run with two torchruns, --nnodes 2 and a
c10d rendezvous whose store the other node's torchrun holds (started first)."""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
for step in range(3):
    total = torch.ones(2)
    dist.all_reduce(total)
    print(f"step {step}", flush=True)
if os.environ.get("EARLY") != "1":
    dist.barrier()  # the early rank never comes: it returned from its main above
else:
    # without it, gloo's threads at the interpreter's exit may abort the process ("terminate called
    # without an active exception": seen 1 run in 5), and the node would fail too
    dist.destroy_process_group()
print("done", flush=True)
