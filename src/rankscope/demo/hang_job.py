"""A small torch.distributed job (gloo, CPU) that hangs on purpose.

Started by `rankscope demo` and the tests through torchrun. Every rank touches
``$RANKSCOPE_READY_DIR/ready.<rank>`` right before it reaches the point where it hangs,
so a caller knows when to look.

Scenarios (``--scenario``):
  lock          the culprit rank deadlocks on its own lock; the others wait in all_reduce
  skip-barrier  the culprit never reaches the barrier (it sleeps in its data loader)
  deep          the culprit is stuck deep in its own call chain; the others wait in a barrier
                reached through a different deep call chain
  crash         the culprit raises an exception; the others wait in a barrier until torchrun
                tears them down
  crash-hang    the culprit raises an exception, but a non-daemon thread of its own (a prefetcher)
                keeps its process alive: its traceback is in the job's output while the others wait
                in a barrier for ever (no connection closes, so gloo notices nothing)
  exit          the culprit returns early (exit code 0) without joining the barrier: with
                NCCL the others hang; gloo notices the closed connection and fails them
  catch-hang    the culprit's forward pass raises; it logs the exception (logging.exception: no rank
                prefix) and goes on to the barrier, while the others wait in all_reduce for ever
  loader-workers the culprit iterates a DataLoader (2 workers) whose __getitem__ never returns (a read
                that hangs): the rank waits for its workers, the others wait in a barrier; each worker
                touches ``$RANKSCOPE_READY_DIR/loading.<pid>`` once it is stuck
  steps         rank r marks step r+1 with rankscope.progress(); the culprit loops in its data
                loader, the others wait in one barrier at different steps (same line, other iterations)
  ddp-backward  a DistributedDataParallel model: the culprit sleeps in its data loader, the others
                wait in loss.backward(), where DDP's reducer runs the gradient all_reduce from the
                autograd engine (no Python frame of the collective on their stacks)
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist


def mark_ready(rank: int) -> None:
    ready_dir = os.environ.get("RANKSCOPE_READY_DIR")
    if ready_dir:
        Path(ready_dir, f"ready.{rank}").touch()


def heartbeat(stop: threading.Event) -> None:
    while not stop.wait(0.2):
        pass


def refresh_cache(lock: threading.Lock) -> None:
    with lock:
        update_index(lock)


def update_index(lock: threading.Lock) -> None:
    with lock:  # the same non-reentrant lock again: this thread waits for itself forever
        pass


def load_batch(step: int) -> None:
    while True:
        time.sleep(0.05)


def decode_record(depth: int) -> None:
    if depth > 0:
        decode_record(depth - 1)
        return
    while True:
        time.sleep(0.05)


def read_shard(rank: int) -> None:
    decode_record(4)


def prefetch_forever() -> None:
    while True:
        time.sleep(0.05)


def sync_gradients(tensor: torch.Tensor) -> None:
    dist.all_reduce(tensor)


def wait_for_peers() -> None:
    dist.barrier()


def compute_loss(rank: int, culprit: int, step: int) -> torch.Tensor:
    if rank == culprit:
        raise ValueError(f"loss is NaN at step {step}")
    return torch.ones(4)


def read_sample(index: int) -> torch.Tensor:
    while True:  # a read that never returns (a dead network mount)
        time.sleep(1)


class StuckShards(torch.utils.data.Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        ready_dir = os.environ.get("RANKSCOPE_READY_DIR")
        if ready_dir:
            Path(ready_dir, f"loading.{os.getpid()}").touch()
        return read_sample(index)


def forward_pass(rank: int) -> None:
    optimizer_step(rank)


def optimizer_step(rank: int) -> None:
    wait_for_peers()


def train_step(scenario: str, rank: int, culprit: int, step: int) -> None:
    mark_ready(rank)
    if scenario == "lock":
        if rank == culprit:
            refresh_cache(threading.Lock())
        sync_gradients(torch.ones(8))
    elif scenario == "skip-barrier":
        if rank == culprit:
            load_batch(step)
        wait_for_peers()
    elif scenario == "deep":
        if rank == culprit:
            read_shard(rank)
        forward_pass(rank)
    elif scenario == "crash":
        if rank == culprit:
            raise RuntimeError(f"CUDA out of memory (simulated) on rank {rank} at step {step}")
        wait_for_peers()
    elif scenario == "crash-hang":
        if rank == culprit:
            threading.Thread(
                target=prefetch_forever, name="prefetch"
            ).start()  # not a daemon: the process stays
            raise RuntimeError(f"bad batch on rank {rank} at step {step}")
        wait_for_peers()
    elif scenario == "catch-hang":
        try:
            loss = compute_loss(rank, culprit, step)
        except ValueError:
            logging.getLogger("train").exception("step %d failed, batch skipped", step)
            wait_for_peers()  # the others are in sync_gradients: both wait for ever
        else:
            sync_gradients(loss)
    elif scenario == "loader-workers":
        if rank == culprit:
            for _ in torch.utils.data.DataLoader(StuckShards(), batch_size=4, num_workers=2):
                pass
        wait_for_peers()
    elif scenario == "steps":
        if rank == culprit:
            load_batch(step)
        wait_for_peers()
    elif scenario == "ddp-backward":
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        if rank == culprit:
            load_batch(step)
        loss = model(torch.ones(2, 4)).sum()
        loss.backward()
    elif scenario == "ddp-forward":
        # every rank runs one DDP step; the culprit then sleeps in its data loader, and the others wait
        # in the second forward, where DDP rebuilds its gradient buckets (a collective, from C++)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        model(torch.ones(2, 4)).sum().backward()
        if rank == culprit:
            load_batch(step)
        model(torch.ones(2, 4)).sum().backward()
    elif scenario == "exit":
        if rank == culprit:
            os._exit(0)
        wait_for_peers()
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", default="lock")
    parser.add_argument("--culprit", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="background threads per rank")
    parser.add_argument("--timeout", type=float, default=600, help="collective timeout in seconds")
    args = parser.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    stop = threading.Event()
    for index in range(args.threads):
        threading.Thread(target=heartbeat, args=(stop,), name=f"heartbeat-{index}", daemon=True).start()

    warmup = torch.ones(4)
    dist.all_reduce(warmup)  # every rank is connected before anything goes wrong
    step = 1
    if args.scenario == "steps":
        import rankscope

        step = rank + 1
        rankscope.progress(step=step, phase="train")
    train_step(args.scenario, rank, args.culprit, step=step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
