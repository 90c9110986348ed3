"""`rankscope doctor` against the manual checklist it replaces, each in a fresh process.

    python bench/bench_doctor.py              # 9 runs each, minimum and median in seconds

The manual checklist (MANUAL below) runs the commands a person types to answer the same questions:
which tools exist, yama and CapEff, ulimit -c and core_pattern, df /dev/shm, ulimit -l, torch /
CUDA / NCCL versions (python -c 'import torch ...'), the NCCL/GLOO/CUDA variables, the interfaces,
the host name lookup, nvidia-smi when present, AMD cards and /proc/cmdline. It prints raw values
and leaves the judging to the reader; rankscope prints verdicts and fixes. Both run with the same
interpreter (the one running this script), so torch is the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")

MANUAL = r"""
for t in py-spy gdb strace pystack; do command -v $t || echo "$t missing"; done
cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo "no yama"
grep CapEff /proc/self/status
ulimit -c; ulimit -Hc
cat /proc/sys/kernel/core_pattern /proc/sys/kernel/core_uses_pid
df -h /dev/shm
ulimit -l
PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available()); print(torch.cuda.nccl.version() if torch.version.cuda else "no nccl")'
env | grep -E '^(NCCL_|GLOO_|CUDA_|TORCH_NCCL)' || true
ls /sys/class/net
getent hosts "$(hostname)"
command -v nvidia-smi >/dev/null && nvidia-smi -q -x >/dev/null && nvidia-smi topo -m
ls /sys/class/infiniband 2>/dev/null || true
grep -l 0x1002 /sys/class/drm/card*/device/vendor 2>/dev/null || true; ls /dev/kfd 2>/dev/null || true
cat /proc/cmdline
"""


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 10):
        raise SystemExit(f"{argv[:3]} failed: {done.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    manual = MANUAL.replace("PY ", f"{sys.executable} ")
    runs = {
        "manual checklist (bash, imports torch)": ["bash", "-c", manual],
        "rankscope doctor": [sys.executable, "-m", "rankscope", "doctor"],
        "rankscope doctor --import-torch": [sys.executable, "-m", "rankscope", "doctor", "--import-torch"],
    }
    for argv in runs.values():
        timed(argv)  # warm the page cache and byte code
    print(f"{'what':42} {'min s':>7} {'median s':>9}")
    for name, argv in runs.items():
        times = [timed(argv) for _ in range(args.repeat)]
        print(f"{name:42} {min(times):7.3f} {statistics.median(times):9.3f}")


if __name__ == "__main__":
    main()
