"""A 2-rank gloo job for `rankscope watch`, one scenario per run (``--scenario``).

Every rank marks its steps with rankscope.progress() and prints ``rank R step S``; a rank that
ends normally touches ``done.<rank>`` in the working directory.

  normal     40 steps of all_reduce, 0.1 s apart; exit 0
  hang       3 steps, then rank 1 loops in load_batch_forever while rank 0 waits in all_reduce
             until the collective timeout (--timeout) fails it; torchrun then ends rank 1
  crash      3 steps, then rank 1 raises in bad_batch while rank 0 sits in evaluate (no collective):
             torchrun tears rank 0 down with SIGTERM; started again by torchrun (--max-restarts), the
             ranks take local steps, rank 1 ten times slower, and exit 0
  straggler  local steps, rank 1 ten times slower than rank 0; one barrier at the end; exit 0
  evaluate   3 steps, then rank 0 computes on one line (evaluate_on_one_line) until ``end-eval``
             exists in the working directory (at most 60 s) while rank 1 waits in a barrier; 3 more
             steps; exit 0
  evaluate-python  as ``evaluate``, rank 0's evaluation a loop of Python calls (its stack moves)
  early      3 steps, then rank 1 returns from main (exit 0) without the last barrier, in which the
             others' gloo connection to it closes: they fail ("Connection closed by peer")
  quiet      no markers, no output: all_reduce every 0.05 s for --healthy seconds (each rank then
             writes ``healthy.<rank>``: the time it ended and its count), then the hang of ``hang``
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
from pathlib import Path

import rankscope


def train_step(step: int) -> None:
    import torch
    import torch.distributed as dist

    tensor = torch.ones(4)
    dist.all_reduce(tensor)


def load_batch_forever() -> None:
    while True:
        time.sleep(0.1)


def evaluate() -> None:
    time.sleep(120)


def evaluate_on_one_line(seconds: float) -> None:
    import torch

    x, end = torch.randn(64, 64), time.monotonic() + seconds
    # one line of builtins and torch calls: no Python frame above it, the same stack at every sample
    while not os.access("end-eval", os.F_OK) and time.monotonic() < end: x = torch.tanh(x @ x)  # noqa: E701  # fmt: skip


def score(x: float) -> float:
    return (x * 1.0001) % 7.0


def descend(depth: int, x: float) -> float:
    return descend(depth - 1, x) if depth else score(x)


def evaluate_in_python(seconds: float) -> None:
    """A loop of Python calls (a metric computed in Python, through calls of 0-39 frames, deeper as the
    clock goes): its stack differs from sample to sample."""
    x, end = 1.0, time.monotonic() + seconds
    while not os.access("end-eval", os.F_OK) and time.monotonic() < end:
        for _ in range(100):
            x = descend(int(time.monotonic() * 1000) % 40, x) + 1.0


def bad_batch(step: int) -> None:
    raise RuntimeError(f"bad batch at step {step}")


def local_step(rank: int) -> None:
    time.sleep(0.3 if rank == 1 else 0.03)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--healthy", type=float, default=10.0)
    args = parser.parse_args()
    if args.scenario == "crash" and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        # The elastic restart after the crash: local steps only (a second gloo rendezvous on this
        # loaded machine sometimes fails to connect, which is not what the test is about), and no
        # torch imported (2 CPU s a rank that the restart's assertions do not need).
        rank = int(os.environ["RANK"])
        # 60 steps: rank 1 straggles for 18 s, time enough for a watcher that was busy with the
        # capture of the crash (a whole `why` pass on a loaded machine) to see it.
        for step in range(60):
            rankscope.progress(step=step)
            local_step(rank)
        while rank == 0 and not Path("done.1").exists():  # the fast rank waits for the slow one
            time.sleep(0.1)
        Path(f"done.{rank}").touch()
        return
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    if args.scenario == "normal":
        for step in range(40):
            rankscope.progress(step=step)
            print(f"rank {rank} step {step}", flush=True)
            train_step(step)
            time.sleep(0.1)
    elif args.scenario in ("hang", "crash"):
        for step in range(3):
            rankscope.progress(step=step)
            print(f"rank {rank} step {step}", flush=True)
            train_step(step)
        if rank == 1:
            time.sleep(0.5)
            if args.scenario == "hang":
                load_batch_forever()
            bad_batch(3)
        elif args.scenario == "hang":
            train_step(3)
        else:
            evaluate()
    elif args.scenario == "quiet":
        import torch

        count, begun = 0, time.monotonic()
        while True:
            # The ranks agree on the last healthy step (each one's clock started apart): otherwise a
            # rank that stopped a step early pairs its hang's all_reduce with the other's last one
            # and exits, and the hang is of a rank that is gone.
            over = torch.tensor([1.0 if time.monotonic() - begun >= args.healthy else 0.0])
            dist.all_reduce(over, op=dist.ReduceOp.MAX)
            count += 1
            if over.item():
                break
            time.sleep(0.05)
        Path(f"healthy.{rank}").write_text(f"{time.time()} {count} {time.monotonic() - begun}")
        if rank == 1:
            load_batch_forever()
        train_step(count)
    elif args.scenario in ("evaluate", "evaluate-python"):
        for step in range(6):
            rankscope.progress(step=step)
            print(f"rank {rank} step {step}", flush=True)
            train_step(step)
            if step == 2 and rank == 0:
                (evaluate_on_one_line if args.scenario == "evaluate" else evaluate_in_python)(60)
            dist.barrier()
    elif args.scenario == "early":
        for step in range(3):
            rankscope.progress(step=step)
            print(f"rank {rank} step {step}", flush=True)
            train_step(step)
        if rank == 1:
            return  # nothing left to do, it thinks
        dist.barrier()
    elif args.scenario == "straggler":
        for step in range(20):
            rankscope.progress(step=step)
            local_step(rank)
        dist.barrier()
    Path(f"done.{rank}").touch()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
