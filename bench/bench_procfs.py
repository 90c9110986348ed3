"""Reading /proc directly (rankscope.procfs) against psutil: import cost and process-table passes.

    python bench/bench_procfs.py                 # this node as it is
    python bench/bench_procfs.py --extra 1000    # plus 1,000 sleeping processes (a busy node)

Every number is the minimum and the median of --repeat fresh interpreters, so psutil's
per-process cache never helps it (the minimum is the steadier one on a shared machine). "after stacks" is the cost of importing psutil once the modules a
`rankscope stacks` run loads anyway are loaded.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Byte code is written and reused, as in an installed rankscope (the first, warm-up run compiles).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {
    "PYTHONPATH": str(ROOT / "src")
}
STACKS_PATH = "import rankscope.cli.main, rankscope.stacks.local"

PASSES = {
    "table: direct": "from rankscope import procfs\nstart()\nprocs = procfs.table()",
    "table: psutil": (
        "import psutil\nstart()\nprocs = [p.info for p in psutil.process_iter(['pid', 'ppid', 'name'])]"
    ),
    # What discovery reads: the table, then the command line and environment of each Python process.
    "discovery: direct": (
        "from rankscope import procfs\nstart()\n"
        "for e in procfs.table().values():\n"
        "    if e.comm.startswith('python'):\n"
        "        e.cmdline, e.environ"
    ),
    "discovery: psutil": (
        "import psutil\nstart()\n"
        "for p in psutil.process_iter(['pid', 'ppid', 'name']):\n"
        "    if (p.info['name'] or '').startswith('python'):\n"
        "        try:\n"
        "            p.cmdline(), p.environ()\n"
        "        except psutil.Error:\n"
        "            pass"
    ),
}


def import_ms(module: str, before: str = "") -> float:
    """Cumulative -X importtime of ``module`` (after ``before`` is imported), in ms."""
    code = (before + "\n" if before else "") + f"import {module}"
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], env=ENV, capture_output=True, text=True, check=True
    ).stderr
    match = re.search(rf"\|\s+(\d+) \| {re.escape(module)}$", err, re.MULTILINE)
    return int(match.group(1)) / 1000 if match else 0.0


def pass_ms(body: str) -> float:
    code = (
        "import time\n"
        "def start():\n    global t0\n    t0 = time.perf_counter()\n"
        f"{body}\nprint((time.perf_counter() - t0) * 1000)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True)
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--extra", type=int, default=0, help="start this many sleeping processes first")
    args = parser.parse_args()
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(args.extra)]
    try:
        processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
        print(f"{processes} processes, {os.cpu_count()} CPUs, {args.repeat} fresh interpreters")
        rows = {
            "import psutil": lambda: import_ms("psutil"),
            "import psutil after stacks": lambda: import_ms("psutil", STACKS_PATH),
            "import rankscope.procfs": lambda: import_ms("rankscope.procfs"),
        }
        rows.update({name: (lambda body=body: pass_ms(body)) for name, body in PASSES.items()})
        for name, measure in rows.items():
            measure()
            samples = [measure() for _ in range(args.repeat)]
            print(f"  {name:28} {min(samples):7.2f} ms min {statistics.median(samples):7.2f} ms median")
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
