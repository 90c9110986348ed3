"""`rankscope core bt` and `rankscope core grab` against the manual commands they replace.

    python bench/bench_core.py                 # 5 runs each, 8 hung torch workers
    python bench/bench_core.py --runs 3 --procs 4

1. `core bt` on a gcore of a hung torch process (torch imported, blocked in a gloo barrier that never
   completes: world size 2, one rank) vs the bare `gdb -batch -ex 'thread apply all bt' PYTHON CORE`.
   rankscope runs gdb (bt + thread apply all bt) and pystack at once, and reads the core's notes.
2. `core grab` of N hung torch processes (all at once) vs gcore of each one after the other (what
   a person's for-loop does), both writing to the same file system.

Every process started here is killed at the end, and every core deleted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYTHON = os.path.realpath(sys.executable)
HUNG = """
import os, sys, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 2, True, wait_for_workers=False)
print("ready", flush=True)
dist.init_process_group("gloo", store=store, rank=0, world_size=2)  # rank 1 never comes
"""


def start_hung(count: int, directory: Path) -> list[subprocess.Popen[bytes]]:
    script = directory / "hung.py"
    script.write_text(HUNG)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(29500 + i)],
            stdout=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, "RANK": str(i), "WORLD_SIZE": str(count)},
        )
        for i in range(count)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    time.sleep(1.0)  # into init_process_group's wait
    return procs


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed ({done.returncode}): {done.stderr[-500:]}")
    return elapsed


def row(name: str, times: list[float]) -> str:
    return f"| {name} | {min(times):.2f} | {statistics.median(times):.2f} | {' '.join(f'{t:.2f}' for t in times)} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--procs", type=int, default=8)
    args = parser.parse_args()
    rankscope = [sys.executable, "-m", "rankscope"]
    scratch = Path(tempfile.mkdtemp(prefix="rankscope-bench-core-"))
    procs = start_hung(args.procs, scratch)
    try:
        pids = [str(p.pid) for p in procs]
        core = scratch / "one"
        subprocess.run(["gcore", "-o", str(core), pids[0]], check=True, capture_output=True)
        core_file = f"{core}.{pids[0]}"
        print(f"core of a hung torch process: {os.path.getsize(core_file) / 1e6:.0f} MB")
        bare, ours = [], []
        for _ in range(args.runs):
            bare.append(timed(["gdb", "-batch", "-ex", "thread apply all bt", PYTHON, core_file]))
            ours.append(timed([*rankscope, "core", "bt", core_file]))
        print("| command | min s | median s | runs |\n|---|---:|---:|---|")
        print(row("gdb -batch -ex 'thread apply all bt' PYTHON CORE", bare))
        print(row("rankscope core bt CORE (gdb + pystack + notes)", ours))
        print(f"ratio of medians: {statistics.median(ours) / statistics.median(bare):.2f}x")
        os.unlink(core_file)
        sequential, parallel = [], []
        for _ in range(args.runs):
            out = scratch / "seq"
            out.mkdir()
            start = time.perf_counter()
            for pid in pids:
                subprocess.run(["gcore", "-o", str(out / "core"), pid], check=True, capture_output=True)
            sequential.append(time.perf_counter() - start)
            shutil.rmtree(out)
            out = scratch / "par"
            parallel.append(timed([*rankscope, "core", "grab", *pids, "--dir", str(out)]))
            shutil.rmtree(out)
        print(f"\ncores of {args.procs} hung torch processes:")
        print("| command | min s | median s | runs |\n|---|---:|---:|---|")
        print(row(f"for pid in {args.procs} pids; do gcore -o DIR/core $pid; done", sequential))
        print(row(f"rankscope core grab {args.procs} pids --dir DIR", parallel))
        print(f"ratio of medians: {statistics.median(parallel) / statistics.median(sequential):.2f}x")
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
