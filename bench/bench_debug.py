"""How soon the other ranks go on after `c`: rankscope.breakpoint's release flag against a plain barrier.

    python bench/bench_debug.py [--hold 2] [--repeat 5]

A real 2-rank torchrun job (gloo, this node). Rank 1 stands in for a person in pdb: it holds for
--hold seconds, writes the time and releases rank 0. rankscope: the flag rankscope.breakpoint's
waiting ranks poll (rankscope.debug.rendezvous, the group's store). Manual (what
`torch.distributed.breakpoint()` and the ForkedPdb snippet do): rank 0 waits in dist.barrier(),
rank 1 enters it after the hold; the barrier's timeout must outlast the session. The latency is
the time from rank 1's release to rank 0 going on (one node, one clock). Also the import cost
inside a training process: `import rankscope` and the first use of `rankscope.breakpoint`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}

JOB = """
import sys, time
from datetime import timedelta
import torch.distributed as dist
from rankscope.debug import rendezvous

hold, repeat = float(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo", timeout=timedelta(seconds=hold * 4 + 60))
rank, store = dist.get_rank(), rendezvous.default_store()
for i in range(repeat):
    dist.barrier()
    flag = rendezvous.StoreFlag(store, f"bench/{i}")
    if rank == 1:
        time.sleep(hold)
        store.set(f"bench/{i}/t", repr(time.time()))
        flag.set()
    else:
        flag.wait()
        print("rankscope", time.time() - float(store.get(f"bench/{i}/t")), flush=True)
    dist.barrier()
    if rank == 1:
        time.sleep(hold)
        store.set(f"barrier/{i}/t", repr(time.time()))
        dist.barrier()
    else:
        dist.barrier()
        print("barrier", time.time() - float(store.get(f"barrier/{i}/t")), flush=True)
dist.destroy_process_group()
"""


def _import_cost(code: str, repeat: int) -> float:
    """The smallest -X importtime total of the top-level imports ``code`` makes, in ms."""
    best = float("inf")
    for _ in range(repeat):
        err = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            env=ENV,
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        total = sum(
            int(line.split("|")[1])
            for line in err.splitlines()
            if line.startswith("import time:")
            and "| " in line
            and line.split("|")[1].strip().isdigit()
            and not line.split("|")[2].startswith("   ")
        )
        best = min(best, total / 1000)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hold", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(JOB)
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    out = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node=2", script.name, str(args.hold), str(args.repeat)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=args.repeat * args.hold * 2 + 120,
        check=True,
    ).stdout
    os.unlink(script.name)
    latency: dict[str, list[float]] = {"rankscope": [], "barrier": []}
    for line in out.splitlines():
        name, _, value = line.partition(" ")
        if name in latency:
            latency[name].append(float(value) * 1000)
    print(f"release latency after a {args.hold:g} s hold, {args.repeat} runs (ms): min / median / max")
    for name, values in latency.items():
        print(f"  {name:9}  {min(values):7.1f} / {statistics.median(values):7.1f} / {max(values):7.1f}")
    ratio = statistics.median(latency["rankscope"]) / statistics.median(latency["barrier"])
    print(f"  median ratio rankscope / barrier: {ratio:.1f}")
    plain = _import_cost("pass", args.repeat)
    package = _import_cost("import rankscope", args.repeat)
    first_use = _import_cost("import rankscope; rankscope.breakpoint", args.repeat)
    print(
        f"imports (ms, -X importtime, best of {args.repeat}): interpreter alone {plain:.1f}, "
        f"+ import rankscope {package - plain:.1f}, + first use of rankscope.breakpoint {first_use - plain:.1f}"
    )


if __name__ == "__main__":
    main()
