"""Progress markers and stacks without ptrace, against what they replace.

    python bench/bench_inproc.py                  # 4-rank job, 5 runs of each stacks path
    python bench/bench_inproc.py --runs 3 --nproc 2

1. ``rankscope.progress(step=i)`` per call (median over batches of 100,000 calls), beside a plain
   attribute assignment (``state.step = i``) and a dict update (``state.update(step=i)``): the cheapest
   ways a loop can record where it is, which nobody outside the process can read. Also a call with an
   unchanged label (``phase="train"``), and one whose label changes every call (encoded each time).
2. ``rankscope stacks --via-signal`` against ``rankscope stacks`` (py-spy) on the same hung 4-rank
   torchrun job (gloo, CPU; hang_job.py scenario "steps", started with RANKSCOPE_INPROC=1): the wall
   time of the whole command, as a user waits for it.

Every process started here is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BATCH = 100_000


def per_call(function: Callable[[int], None], batches: int = 15) -> float:
    """Median CPU nanoseconds per call over ``batches`` batches (the loop and one Python call included).

    CPU time of this thread (time.thread_time_ns), not wall time: on a shared machine other processes'
    load would otherwise be counted as the call's.
    """

    def run(f: Callable[[int], None]) -> list[float]:
        out = []
        for _ in range(batches):
            start = time.thread_time_ns()
            for i in range(BATCH):
                f(i)
            out.append((time.thread_time_ns() - start) / BATCH)
        return out

    return statistics.median(run(function))


def bench_progress(directory: Path) -> None:
    os.environ["RANKSCOPE_RUNTIME_DIR"] = str(directory)
    import rankscope

    mark = rankscope.progress

    class State:
        step = 0

    state = State()
    table: dict[str, int] = {}

    def attribute(i: int) -> None:
        state.step = i

    def update(i: int) -> None:
        table.update(step=i)

    def marker(i: int) -> None:
        mark(step=i)

    def marker_label(i: int) -> None:
        mark(step=i, phase="train")

    def marker_new_label(i: int) -> None:
        mark(step=i, batch=i)

    def nothing(i: int) -> None:
        pass

    rows = [
        ("state.step = i (plain attribute)", per_call(attribute)),
        ("an empty function (the loop and the call alone)", per_call(nothing)),
        ("state.update(step=i) (dict)", per_call(update)),
        ("rankscope.progress(step=i)", per_call(marker)),
        ('rankscope.progress(step=i, phase="train") (label unchanged)', per_call(marker_label)),
        ("rankscope.progress(step=i, batch=i) (label changes every call)", per_call(marker_new_label)),
    ]
    print(
        f"progress markers (Python {sys.version.split()[0]}), CPU ns per call, median of 15 batches of {BATCH:,}:"
    )
    for name, ns in rows:
        print(f"  {name:<66} {ns:8.0f} ns")
    mark_ns = rows[3][1]
    print(f"  progress(step=i) / attribute: {mark_ns / rows[0][1]:.1f}x; within 1 us: {mark_ns <= 1000}")


def timed(argv: list[str]) -> tuple[float, int, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    return time.perf_counter() - start, done.returncode, done.stdout[-2000:] + done.stderr[-2000:]


def bench_stacks(runs: int, nproc: int, directory: Path) -> None:
    from rankscope.demo.launch import start_torchrun

    env = {**os.environ, "RANKSCOPE_INPROC": "1", "RANKSCOPE_RUNTIME_DIR": str(directory / "rt")}
    job = start_torchrun(
        nproc=nproc,
        script_args=("--scenario", "steps", "--culprit", str(nproc - 1)),
        workdir=directory,
        env=env,
    )
    try:
        job.wait_ready(timeout=180)
        base = [sys.executable, "-m", "rankscope", "stacks", "--pid", str(job.pid), "--json"]
        # Both paths also gather the ranks' flight recorders (on by default, torch 2.13 records by
        # default); --no-fr shows what that adds.
        variants = (
            ("py-spy", base),
            ("--via-signal", [*base, "--via-signal"]),
            ("py-spy --no-fr", [*base, "--no-fr"]),
            ("--via-signal --no-fr", [*base, "--via-signal", "--no-fr"]),
        )
        results: dict[str, list[float]] = {name: [] for name, _ in variants}
        for _ in range(runs):
            for name, argv in variants:
                seconds, code, err = timed(argv)
                assert code == 0, f"{name} exited {code}: {err}"
                results[name].append(seconds)
        print(f"\nrankscope stacks on a hung {nproc}-rank torchrun job, wall seconds, median of {runs}:")
        for name, values in results.items():
            print(
                f"  {name:<22} {statistics.median(values):6.3f} s   (min {min(values):.3f}, max {max(values):.3f})"
            )
        ratio = statistics.median(results["--via-signal"]) / statistics.median(results["py-spy"])
        print(f"  --via-signal / py-spy: {ratio:.2f}x")
        recorders = statistics.median(results["py-spy"]) / statistics.median(results["py-spy --no-fr"])
        print(f"  py-spy with recorders / --no-fr: {recorders:.2f}x")
    finally:
        job.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--skip-stacks", action="store_true", help="only the progress markers")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rankscope-bench-inproc-") as scratch:
        bench_progress(Path(scratch) / "markers")
        if not args.skip_stacks:
            bench_stacks(args.runs, args.nproc, Path(scratch))


if __name__ == "__main__":
    main()
