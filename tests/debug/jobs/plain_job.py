"""Two processes of a job without torch: rank 1 stops in pdb, rank 0 waits for it on a file."""

import os

import rankscope

rank = int(os.environ["RANK"])
rankscope.breakpoint(rank=1)
print(f"rank {rank} went on", flush=True)
