"""Generate an interleaved console log of a 512-rank job that ends in a crash.

64 hosts x 8 ranks with torchrun ``--role $(hostname -s): --tee 3`` prefixes (``[node017:137]:``).
The body is training chatter (timestamps, losses, throughput, dataloader warnings) with, from
the first MB on and every 4 MB after, a caught exception that one rank logs with its traceback
(``logging.exception``) before it trains on. The end is the crash: rank 203 dies of a
``ValueError`` in its own code (the root cause); then every other rank prints a traceback,
interleaved line by line with the others: 414 ranks lose their gloo peer (``Connection closed by
peer``) and 97 see their NCCL communicator aborted (victims; messages differ in numbers).

``--unlocked P`` writes the log as ranks printing without a lock would: ``print`` writes a
line's text and its newline apart, and with probability P a rank's newline lands after the
next rank's text (one physical line then holds several ranks' text, and an empty line follows).

Usage: python bench/gen_logs.py OUT [--size-mb 1024] [--seed 1] [--unlocked 0.05]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

HOSTS = 64
PER_HOST = 8
RANKS = HOSTS * PER_HOST
#: The rank whose own error ends the job, and how many of the others lose their gloo peer.
FATAL_RANK = 203
GLOO_VICTIMS = 414
#: No caught exception this close to the crash: its rank must write on long enough to show it lived.
QUIET_BEFORE_CRASH = 16 << 20


def prefix(rank: int) -> str:
    return f"[node{rank // PER_HOST:03d}:{rank}]:"


def traceback_lines(rank: int, kind: str) -> list[str]:
    site = "/opt/conda/lib/python3.11/site-packages"
    frames = [
        ("/workspace/train.py", 412, "<module>", "main(cfg)"),
        ("/workspace/train.py", 388, "main", "trainer.fit(model, loader)"),
        (f"{site}/trainer/loop.py", 97, "fit", "loss = self.step(batch)"),
        (f"{site}/trainer/loop.py", 143, "step", "self.sync(grads)"),
    ]
    if kind == "fatal":
        frames[2:] = [
            ("/workspace/data.py", 58, "collate", "labels = encode(batch.labels)"),
            ("/workspace/data.py", 31, "encode", "raise ValueError(f'label {x} out of range')"),
        ]
        tail = "ValueError: label 1000 out of range for 100 classes"
    elif kind == "gloo":
        tail = (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            f"[10.1.{rank // PER_HOST}.{rank % 250}]:{20000 + rank}"
        )
    else:
        frames.append((f"{site}/torch/distributed/distributed_c10d.py", 2501, "all_reduce", "work.wait()"))
        tail = (
            f"torch.distributed.DistBackendError: NCCL communicator was aborted on rank {rank}. "
            f"Last enqueued NCCL work: {51000 + rank}, last completed NCCL work: {50999 + rank}."
        )
    lines = ["Traceback (most recent call last):"]
    for filename, line, func, code in frames:
        lines.append(f'  File "{filename}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(tail)
    return lines


def chatter(rank: int, step: int, rng: random.Random) -> str:
    second = step // 20
    day, hour, minute = 1 + second // 86400 % 28, second // 3600 % 24, second // 60 % 60
    stamp = f"2024-05-{day:02d} {hour:02d}:{minute:02d}:{second % 60:02d}"
    pick = rng.random()
    if pick < 0.80:
        return (
            f"{stamp},{rank % 1000:03d} INFO trainer: step {step} loss {2.5 - step * 1e-6:.4f} "
            f"lr 3.0e-04 grad_norm {0.9 + (rank % 13) * 0.01:.3f} tokens/s {41000 + rank * 3}"
        )
    if pick < 0.95:
        return f"{stamp},{rank % 1000:03d} INFO dataloader: worker {rank % 8} prefetched shard {step % 977}"
    return f"{stamp},{rank % 1000:03d} WARNING torch: skipped batch with {rank % 5 + 1} empty sequences"


def unlocked(data: bytes, rng: random.Random, chance: float) -> bytes:
    """``data`` (whole lines) as unlocked writers leave it: some newlines written late."""
    out: list[bytes] = []
    owed: dict[bytes, None] = {}  # ranks (by prefix) whose newline is not written yet
    for line in data.split(b"\n")[:-1]:
        rank = line[: line.find(b"]") + 1]
        if rank in owed:  # a rank writes its own newline before its next text
            del owed[rank]
            out.append(b"\n")
        out.append(line)
        if len(owed) < 4 and rng.random() < chance:
            owed[rank] = None
        else:
            out.append(b"\n")
        if owed and rng.random() < 0.5:
            del owed[next(iter(owed))]
            out.append(b"\n")
    out.append(b"\n" * len(owed))
    return b"".join(out)


def generate(out: Path, size_mb: int, seed: int = 1, unlocked_chance: float = 0.0) -> int:
    rng = random.Random(seed)
    target = size_mb << 20
    crash_lines = [prefix(FATAL_RANK) + line for line in traceback_lines(FATAL_RANK, "fatal")]
    others = [rank for rank in range(RANKS) if rank != FATAL_RANK]
    gloo = set(rng.sample(others, GLOO_VICTIMS))
    tracebacks = {rank: traceback_lines(rank, "gloo" if rank in gloo else "nccl") for rank in others}
    # The victims: lines of all ranks interleaved, each rank's own order kept.
    cursors = {rank: 0 for rank in others}
    while cursors:
        rank = rng.choice(list(cursors))
        crash_lines.append(prefix(rank) + tracebacks[rank][cursors[rank]])
        cursors[rank] += 1
        if cursors[rank] == len(tracebacks[rank]):
            del cursors[rank]
    crash = ("\n".join(crash_lines) + "\n").encode()
    if unlocked_chance:
        crash = unlocked(crash, rng, unlocked_chance)
    written = 0
    step = 0
    prefixes = [prefix(rank) for rank in range(RANKS)]
    with open(out, "wb") as handle:
        next_caught = 1 << 20
        while written < target - len(crash):
            step += 1
            block = "\n".join(prefixes[r] + chatter(r, step, rng) for r in range(RANKS)) + "\n"
            if next_caught < written < target - QUIET_BEFORE_CRASH:
                rank = rng.randrange(RANKS)
                caught = [
                    "2024-05-01 00:00:00,000 ERROR trainer: skipping a corrupt sample",
                    *traceback_lines(rank, "nccl")[:-1],
                    "ValueError: corrupt sample in shard 12 (skipped)",
                ]
                block += "\n".join(prefixes[rank] + line for line in caught) + "\n"
                next_caught += 4 << 20
            data = block.encode()
            if unlocked_chance:
                data = unlocked(data, rng, unlocked_chance)
            handle.write(data)
            written += len(data)
        handle.write(crash)
        written += len(crash)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--unlocked", type=float, default=0.0, help="Chance of a late newline.")
    args = parser.parse_args()
    size = generate(args.out, args.size_mb, args.seed, args.unlocked)
    print(f"wrote {size / 1e6:.0f} MB to {args.out}")


if __name__ == "__main__":
    main()
