"""`bench allreduce` inside one rank: time all_reduce over a sweep of payload sizes; rank 0 gets everyone's times.

Test hook (set only by rankscope's own tests): RANKSCOPE_BENCH_DELAY_RANK=k and
RANKSCOPE_BENCH_DELAY_S=seconds make rank k sleep before each timed all_reduce, as a slow rank would.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

from rankscope.cmdline import flag, to_flags
from rankscope.gputest.bandwidth import BenchResult, RankTimes, analyse
from rankscope.gputest.rank import default_backend, require_torch
from rankscope.ranks import current_rank

DELAY_RANK_HOOK = "RANKSCOPE_BENCH_DELAY_RANK"
DELAY_SECONDS_HOOK = "RANKSCOPE_BENCH_DELAY_S"


@dataclass(frozen=True)
class BenchOptions:
    backend: Optional[str] = flag("--backend", None)
    nproc: Optional[int] = None
    min_bytes: str = flag("--min-bytes", "1K")
    max_bytes: str = flag("--max-bytes", "16M")
    factor: int = flag("--factor", 4)
    warmup: int = flag("--warmup", 5)
    iters: int = flag("--iters", 20)
    timeout: float = flag("--timeout", 120.0)
    json: bool = flag("--json", False)
    #: Written as an absolute path: the rank may run elsewhere.
    plot: Optional[str] = None

    def rank_argv(self) -> list[str]:
        """The command line each rank of `--nproc` runs: the same sweep, without the launching."""
        argv = ["bench", "allreduce", *to_flags(self)]
        return argv + (["--plot", os.path.abspath(self.plot)] if self.plot else [])


def run_bench(
    backend: Optional[str],
    sizes: Sequence[int],
    warmup: int,
    iters: int,
    timeout: float,
    env: Optional[Mapping[str, str]] = None,
) -> Optional[BenchResult]:
    """Every rank runs the sweep; rank 0 returns the analysed result, the others None."""
    env = os.environ if env is None else env
    torch = require_torch()
    import torch.distributed as dist

    ident = current_rank()
    rank = ident.rank or 0
    local = ident.local_rank or 0
    backend = backend or default_backend(torch)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    delay = float(env.get(DELAY_SECONDS_HOOK, "0.05")) if env.get(DELAY_RANK_HOOK) == str(rank) else 0.0

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    means = []
    try:
        for size in sizes:
            payload = torch.ones(size // 4, dtype=torch.float32, device=device)
            for _ in range(warmup):
                dist.all_reduce(payload)
            sync()
            dist.barrier()
            spent = 0.0
            for _ in range(iters):
                if delay:
                    time.sleep(delay)
                began = time.perf_counter()
                dist.all_reduce(payload)
                sync()
                spent += time.perf_counter() - began
            means.append(spent / iters)
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (ident.host, rank, means))
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    ranks = [RankTimes(host, r, list(times)) for host, r, times in sorted(gathered, key=lambda g: g[1])]
    return analyse(backend, sizes, 4, ranks, warmup, iters)
