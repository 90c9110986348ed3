"""What a stack request costs the job: iteration times with and without requests, side by side.

    python bench/bench_dump_cost.py                 # 20 ms iterations, 8 blocks of 2 s per mode
    python bench/bench_dump_cost.py --blocks 4 --iteration-ms 20

Target (docs/benchmarks.md): a dump request raises the job's median iteration time by at most 10% and
at most 5 ms, on a job with 20 ms iterations.

The job (started with RANKSCOPE_INPROC=1, four background threads besides the main one) runs
iterations of pure-Python work calibrated to ``--iteration-ms``: Python bytecode holds the GIL, the
worst case for a dump taken under the GIL (torch ops release it). Blocks of ``--block`` seconds
alternate: quiet, then requests, so the machine's load drifts into both alike. Each iteration is
counted in the block it started in. Request modes, each against its own quiet blocks:

- ``raw``: a ``stacks`` request written into the handler's FIFO every 50 ms by this process (as a
  ``--samples`` run at ``--interval 0.05`` does), its reply read and removed;
- ``raw-fr``: the same with ``fr`` requests (the handler's side of the flight recorder alone);
- ``cli``: ``rankscope stacks --pid P --via-signal --no-fr`` run back to back (a user watching; the
  command's own start-up shares the machine's cores with the job);
- ``cli+fr``: the same with the flight recorder asked for too (the default).

``--torch``: every iteration also makes an all_reduce in a one-rank gloo group, so the recorder holds
entries and ``cli+fr`` dumps a real one (its first dump in the process included).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

JOB = r"""
import json, os, sys, threading, time
iteration = float(sys.argv[1]) / 1000
stop = sys.argv[2]
def idle(n):
    while True:
        time.sleep(0.05 * (n + 1))
for n in range(4):
    threading.Thread(target=idle, args=(n,), name=f"worker-{n}", daemon=True).start()
def work(rounds):
    total = 0
    for i in range(rounds):
        total += i * i
    return total
# Calibrate: rounds of work per iteration.
rounds, spent = 10000, 0.0
while spent < 0.2:
    rounds *= 2
    start = time.perf_counter(); work(rounds); spent = time.perf_counter() - start
rounds = int(rounds * iteration / spent)
step = lambda: work(rounds)
if sys.argv[3] == "torch":
    # A one-rank gloo group: every iteration also records an all_reduce in the flight recorder.
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    tensor = torch.ones(1024)
    def step():
        work(rounds)
        dist.all_reduce(tensor)
print("up", flush=True)
times = []
while not os.path.exists(stop):
    start = time.monotonic()
    step()
    times.append((start, time.monotonic() - start))
print(json.dumps(times), flush=True)
"""


def raw_requests(directory: Path, pid: int, until: threading.Event, kind: str = "stacks") -> None:
    from rankscope.inproc import runtime

    info = json.loads(Path(runtime.files_of(str(directory), pid)["inproc"]).read_text())
    base = directory / info["base"]
    count = 0
    while not until.is_set():
        ident = f"b{count:x}"
        fd = os.open(f"{base}.req", os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, json.dumps({"v": 2, "id": ident, "kind": kind, "args": {"id": ident}}).encode() + b"\n")
        os.close(fd)
        reply = Path(f"{base}.{ident}.reply")
        deadline = time.monotonic() + 5
        while not reply.exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        reply.unlink(missing_ok=True)
        Path(f"{base}.{ident}.fr").unlink(missing_ok=True)
        count += 1
        until.wait(0.05)


def cli_requests(pid: int, until: threading.Event, extra: list[str], failed: list[str]) -> None:
    """Back-to-back runs; a run that did not dump the job is kept in ``failed`` (on a shared machine
    another user's py-spy or gdb may hold the job stopped for a while: state ``t``)."""
    argv = [sys.executable, "-m", "rankscope", "stacks", "--pid", str(pid), "--via-signal", "--json", *extra]
    while not until.is_set():
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            failed.append(done.stdout[-300:] + done.stderr[-300:])


def run_mode(
    mode: str, blocks: int, block: float, iteration_ms: float, scratch: Path, torch: bool
) -> dict[str, float]:
    directory = scratch / mode / "rt"
    stop = scratch / mode / "stop"
    stop.parent.mkdir(parents=True)
    env = {**os.environ, "RANKSCOPE_INPROC": "1", "RANKSCOPE_RUNTIME_DIR": str(directory), "RANK": "0"}
    if torch:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="1")
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, str(iteration_ms), str(stop), "torch" if torch else "plain"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    windows: list[tuple[float, float]] = []
    failed: list[str] = []
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "up"
        time.sleep(1.0)  # past start-up
        for _ in range(blocks):
            time.sleep(block)  # quiet
            until = threading.Event()
            if mode in ("raw", "raw-fr"):
                kind = "fr" if mode == "raw-fr" else "stacks"
                sender = threading.Thread(target=raw_requests, args=(directory, job.pid, until, kind))
            else:
                extra = ["--no-fr"] if mode == "cli" else []
                sender = threading.Thread(target=cli_requests, args=(job.pid, until, extra, failed))
            begun = time.monotonic()
            sender.start()
            time.sleep(block)
            until.set()
            sender.join()
            windows.append((begun, time.monotonic()))
        stop.touch()
        out, _ = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert job.returncode == 0, f"the job exited {job.returncode}"
    times = json.loads(out.strip().splitlines()[-1])
    first = windows[0][0] - block
    quiet, asked = [], []
    for start, seconds in times:
        if start < first:
            continue
        inside = any(a <= start < b for a, b in windows)
        (asked if inside else quiet).append(seconds * 1000)
    return {
        "quiet_ms": statistics.median(quiet),
        "requests_ms": statistics.median(asked),
        "quiet_n": len(quiet),
        "requests_n": len(asked),
        "failed_runs": len(failed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--block", type=float, default=2.0, help="seconds per block")
    parser.add_argument("--iteration-ms", type=float, default=20.0)
    parser.add_argument("--modes", nargs="+", default=["raw", "cli", "cli+fr"])
    parser.add_argument(
        "--torch",
        action="store_true",
        help="the job also runs an all_reduce per iteration in a one-rank gloo group (a real flight recorder)",
    )
    args = parser.parse_args()
    print(
        f"median iteration time, {args.iteration_ms:g} ms iterations, {args.blocks} blocks of {args.block:g} s "
        f"quiet / with requests{' (torch job)' if args.torch else ''} (Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}):"
    )
    print(f"  {'mode':<8} {'quiet':>9} {'requests':>9} {'ratio':>6} {'delta':>8}   iterations")
    with tempfile.TemporaryDirectory(prefix="rankscope-bench-dump-") as scratch:
        for mode in args.modes:
            r = run_mode(mode, args.blocks, args.block, args.iteration_ms, Path(scratch), args.torch)
            ratio = r["requests_ms"] / r["quiet_ms"]
            delta = r["requests_ms"] - r["quiet_ms"]
            ok = ratio <= 1.10 and delta <= 5.0
            print(
                f"  {mode:<8} {r['quiet_ms']:7.2f}ms {r['requests_ms']:7.2f}ms {ratio:5.2f}x {delta:+7.2f}ms"
                f"   {int(r['quiet_n'])}/{int(r['requests_n'])}  {'within target' if ok else 'OVER TARGET'}"
                + (f"  ({int(r['failed_runs'])} runs did not dump it)" if r["failed_runs"] else "")
            )


if __name__ == "__main__":
    main()
