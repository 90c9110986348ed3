"""`rankscope fr` against torch's own analyzer (`python -m torch.distributed.flight_recorder.fr_trace`)
on the same synthetic dumps, in one run.

    python bench/bench_fr.py                       # 512 ranks x 2000 entries, 3 runs each
    python bench/bench_fr.py --ranks 64 --entries 500 --runs 1

The dumps are what torch 2.13 writes with NCCL (pickles named rank_<N>, pg_config naming the
default group, every entry with 4 Python frames of its own); every rank issued ENTRIES all_reduces
from the same line, except rank 7, which issued a barrier from another line at collective
ENTRIES - 10 and stopped there (the others wait in their all_reduce of that number). Both tools run
as a user runs them, each in its own process: `rankscope fr DIR --json` and
`python -m torch.distributed.flight_recorder.fr_trace DIR`. Each must name rank 7; the ratio is
torch's median time over rankscope's.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SITE = "/venv/lib/python3.11/site-packages/torch/distributed"


def frames(function: str, line: int) -> list[dict[str, object]]:
    return [
        {
            "name": "all_reduce" if function != "main" else "barrier",
            "filename": f"{SITE}/distributed_c10d.py",
            "line": 3245,
        },
        {"name": "wrapper", "filename": f"{SITE}/c10d_logger.py", "line": 83},
        {"name": function, "filename": "/home/user/job/train.py", "line": line},
        {"name": "<module>", "filename": "/home/user/job/train.py", "line": 90},
    ]


def write_dumps(directory: Path, ranks: int, entries: int) -> int:
    odd_rank, odd_seq = 7, entries - 10
    total = 0
    for rank in range(ranks):
        rows = []
        # Every rank stops at the collective where rank 7 diverged: the others wait in it.
        for seq in range(1, odd_seq + 1):
            odd = rank == odd_rank and seq == odd_seq
            rows.append(
                {
                    "record_id": seq - 1,
                    "pg_id": 0,
                    "process_group": ("0", "default_pg"),
                    "collective_seq_id": seq,
                    "p2p_seq_id": 0,
                    "op_id": seq,
                    "profiling_name": "nccl:barrier" if odd else "nccl:all_reduce",
                    "time_created_ns": 1_700_000_000_000_000_000 + seq * 1000 + rank,
                    "input_sizes": [[1]] if odd else [[65536]],
                    "input_dtypes": ["Float"],
                    "output_sizes": [[1]] if odd else [[65536]],
                    "output_dtypes": ["Float"],
                    "state": "scheduled" if seq == odd_seq else "completed",
                    "time_discovered_started_ns": None,
                    "time_discovered_completed_ns": None,
                    "retired": seq != odd_seq,
                    "timeout_ms": 600000,
                    "is_p2p": False,
                    "frames": frames("main", 63) if odd else frames("step", 45),
                }
            )
        total += len(rows)
        dump = {
            "version": "2.10",
            "comm_lib_version": "2.28.9",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}},
            "pg_status": {
                "0": {
                    "last_enqueued_collective": odd_seq,
                    "last_started_collective": -1,
                    "last_completed_collective": odd_seq - 1,
                }
            },
            "entries": rows,
        }
        (directory / f"rank_{rank}").write_bytes(pickle.dumps(dump))
    return total


def timed(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    return elapsed, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fr-") as tmp:
        directory = Path(tmp)
        start = time.perf_counter()
        total = write_dumps(directory, args.ranks, args.entries)
        size = sum(p.stat().st_size for p in directory.iterdir())
        print(
            f"{args.ranks} ranks, {total} entries ({size / 2**20:.0f} MiB of pickles) written in "
            f"{time.perf_counter() - start:.1f}s"
        )
        ours = [sys.executable, "-m", "rankscope", "fr", str(directory), "--json"]
        theirs = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(directory)]
        times: dict[str, list[float]] = {"rankscope fr": [], "torch fr_trace": []}
        for _ in range(args.runs):
            for name, argv in (("rankscope fr", ours), ("torch fr_trace", theirs)):
                elapsed, out = timed(argv)
                assert (
                    ("Culprit rank 7" in out)
                    if name.startswith("torch")
                    else ('"suspects": [\n        7' in out)
                ), out[-2000:]
                times[name].append(elapsed)
        for name, values in times.items():
            print(
                f"{name:16s} median {statistics.median(values):7.2f}s  (runs: {', '.join(f'{v:.2f}' for v in values)})"
            )
        ratio = statistics.median(times["torch fr_trace"]) / statistics.median(times["rankscope fr"])
        print(f"torch's analyzer / rankscope: {ratio:.2f}x")


if __name__ == "__main__":
    main()
