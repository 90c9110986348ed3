"""The inf/NaN detector's cost on a training loop, beside the loop alone and torch's anomaly mode.

    python bench/bench_numerics.py                      # dim 64 and 256, 4 blocks, 20 steps
    python bench/bench_numerics.py --dims 512 --steps 10

One process, one thread (torch.set_num_threads(1): steadier on a shared machine). Each variant
runs the same steps (forward, loss, backward, SGD step) of a stack of pre-norm transformer blocks;
the variants take turns (each round starting with the next one), --repeat times, and each reports
its fastest run per step and its ratio to the plain loop. Time is this process's CPU time, not wall
time: with one thread it counts the work of the loop and not the waits for a core that other
processes hold (wall-clock minima on a loaded 2-core machine swung by 1.5x between runs).

- plain: the loop alone;
- detector: ``with rankscope.numerics.detect_anomalies(model, on_anomaly="record")`` (forward and
  backward hooks on every module);
- detector, forward only: ``backward=False``;
- set_detect_anomaly: ``with torch.autograd.set_detect_anomaly(True)``, the manual way (it
  records a traceback for every forward op and checks every backward function's output).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from rankscope.numerics import detect_anomalies
from rankscope.numerics.demo import transformer_block


def make_model(dim: int, depth: int) -> Any:
    block = transformer_block(dim=dim, heads=4)
    torch.manual_seed(0)
    return torch.nn.Sequential(*(block() for _ in range(depth)))


@contextlib.contextmanager
def plain(model: Any) -> Iterator[None]:
    yield


@contextlib.contextmanager
def detector(model: Any) -> Iterator[None]:
    with detect_anomalies(model, on_anomaly="record") as watching:
        yield
    assert watching.anomaly is None


@contextlib.contextmanager
def forward_only(model: Any) -> Iterator[None]:
    with detect_anomalies(model, on_anomaly="record", backward=False) as watching:
        yield
    assert watching.anomaly is None


@contextlib.contextmanager
def anomaly_mode(model: Any) -> Iterator[None]:
    with torch.autograd.set_detect_anomaly(True):
        yield


VARIANTS: dict[str, Callable[[Any], Any]] = {
    "plain": plain,
    "detector": detector,
    "detector, forward only": forward_only,
    "set_detect_anomaly(True)": anomaly_mode,
}


def run(model: Any, x: Any, steps: int, variant: Callable[[Any], Any]) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    with variant(model):
        start = time.process_time()
        for _ in range(steps):
            optimizer.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            optimizer.step()
        return (time.process_time() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, 1 thread, {args.depth} blocks, batch {args.batch} x length {args.length}"
    )
    for dim in args.dims:
        model = make_model(dim, args.depth)
        modules = sum(1 for _ in model.modules())
        x = torch.randn(args.batch, args.length, dim)
        run(model, x, 2, plain)  # warm-up
        best = {name: float("inf") for name in VARIANTS}
        names = list(VARIANTS)
        for round_ in range(args.repeat):
            for name in (
                names[round_ % len(names) :] + names[: round_ % len(names)]
            ):  # each goes first in turn
                best[name] = min(best[name], run(model, x, args.steps, VARIANTS[name]))
        print(
            f"\ndim {dim} ({modules} modules), CPU ms per step (fastest of {args.repeat} x {args.steps} steps):"
        )
        for name, seconds in best.items():
            print(f"  {name:<26} {seconds * 1e3:8.2f} ms   {seconds / best['plain']:5.2f}x plain")


if __name__ == "__main__":
    main()
