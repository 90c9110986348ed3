"""Benchmark `rankscope why` against `rankscope stacks` alone, side by side in one run.

    python bench/bench_why.py                   # 16 ranks, 5 alternating runs each
    python bench/bench_why.py --ranks 8 16 --repeat 3

A real torchrun job (gloo, `hang_job.py --scenario lock`: one rank deadlocks, the others wait in
all_reduce) whose output goes to /dev/null, so the stacks are the only evidence `why` finds; it
still looks for every other signal (recorders, ended ranks, runtime files, error files, the job's
output, kernel messages), which is its cost over `stacks`. Both are timed as whole CLI runs
(interpreter start-up included); medians of alternating runs. Goals (docs/benchmarks.md): `why`
within 10 s for 16 ranks, and no more than 1.5x `stacks` alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

BIN = Path(sys.executable).parent


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return time.perf_counter() - start, proc.returncode, proc.stdout


def bench(ranks: int, repeat: int) -> dict[str, object]:
    from rankscope.demo.launch import start_torchrun

    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    with open(os.devnull, "wb") as devnull:
        job = start_torchrun(
            nproc=ranks,
            script_args=["--scenario", "lock", "--culprit", "1"],
            workdir=Path(tempfile.mkdtemp(prefix="bench-why-")),
            stdout=devnull,
        )
    try:
        job.wait_ready(timeout=600)
        stacks = [str(BIN / "rankscope"), "stacks", "--pid", str(job.pid), "--no-color"]
        why = [str(BIN / "rankscope"), "why", "--pid", str(job.pid), "--json"]
        stacks_times: list[float] = []
        why_times: list[float] = []
        verdict: object = None
        for _ in range(repeat):
            stacks_times.append(timed(stacks, env)[0])
            seconds, code, out = timed(why, env)
            why_times.append(seconds)
            if code == 15:
                verdict = json.loads(out)["verdict"]
        stacks_median = statistics.median(stacks_times)
        why_median = statistics.median(why_times)
        return {
            "ranks": ranks,
            "stacks_s": round(stacks_median, 3),
            "why_s": round(why_median, 3),
            "why_max_s": round(max(why_times), 3),
            "ratio": round(why_median / stacks_median, 2),
            "culprit": verdict["ranks"] if isinstance(verdict, dict) else None,
            "cause": verdict["cause"] if isinstance(verdict, dict) else None,
        }
    finally:
        job.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[16])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for ranks in args.ranks:
        row = bench(ranks, args.repeat)
        print(json.dumps(row))
        print(
            f"{ranks} ranks: why {row['why_s']} s (max {row['why_max_s']} s, goal 10 s), stacks {row['stacks_s']} s, "
            f"ratio {row['ratio']}x (goal <= 1.5x); verdict {row['cause']} ranks {row['culprit']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
