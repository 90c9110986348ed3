"""`rankscope fds` and `rankscope strace` against doing the same by hand.

    python bench/bench_inspect.py [--sockets 200] [--seconds 2] [--repeat 5]

fds: a target holding --sockets TCP connections (both ends, so 2x that many sockets), as many
files and a few pipes. Manual: `ls -l /proc/PID/fd` then `ss -tanp` (to put addresses on the
socket inodes). rankscope: `python -m rankscope fds PID` (a fresh interpreter each time).

strace: a target making system calls as fast as it can (write to /dev/null, a failing open)
plus three idle threads. Bare: `strace -f -p PID -T -tt -qq -o FILE`, ended by SIGTERM after
--seconds. rankscope: `python -m rankscope strace PID --seconds N`. The difference is
rankscope's start, detaching, reading the descriptors and summarising the lines; the lines
strace wrote are counted too.

Minimum and median of --repeat runs (the minimum is the steadier one on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

HOLDER = """
import os, socket, sys, tempfile, time
n = int(sys.argv[1])
listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen(n)
keep = []
for _ in range(n):
    keep.append(socket.create_connection(listener.getsockname()))
    keep.append(listener.accept()[0])
directory = tempfile.mkdtemp()
for i in range(n):
    keep.append(open(os.path.join(directory, str(i)), "w"))
keep.extend(os.pipe())
print(os.getpid(), flush=True)
time.sleep(3600)
"""

BUSY = """
import os, threading, time
for _ in range(3):
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
null = os.open("/dev/null", os.O_WRONLY)
print(os.getpid(), flush=True)
while True:
    os.write(null, b"x")
    try:
        open("/nonexistent/bench")
    except OSError:
        pass
"""


def _start(script: str, *args: str) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def _stop(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _timed(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=ENV, check=False).stdout
    return time.perf_counter() - start, out


def _manual_fds(pid: int) -> tuple[float, str]:
    start = time.perf_counter()
    listing = subprocess.run(["ls", "-l", f"/proc/{pid}/fd"], capture_output=True, text=True).stdout
    sockets = subprocess.run(["ss", "-tanp"], capture_output=True, text=True).stdout
    return time.perf_counter() - start, listing + sockets


def _bare_strace(pid: int, seconds: float) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as scratch:
        output = os.path.join(scratch, "out")
        start = time.perf_counter()
        process = subprocess.Popen(["strace", "-f", "-p", str(pid), "-T", "-tt", "-qq", "-o", output])
        time.sleep(seconds)
        process.terminate()
        process.wait()
        elapsed = time.perf_counter() - start
        return elapsed, Path(output).read_text(errors="replace")


def _row(name: str, runs: list[tuple[float, str]]) -> str:
    times = [elapsed for elapsed, _ in runs]
    lines = len(runs[-1][1].splitlines())
    return f"| {name} | {min(times):.3f} | {statistics.median(times):.3f} | {lines} |"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    print("| command | min (s) | median (s) | lines of output |")
    print("|---|---|---|---|")
    holder, pid = _start(HOLDER, str(args.sockets))
    try:
        rankscope = [sys.executable, "-m", "rankscope", "fds", str(pid)]
        _timed(rankscope)  # byte code written once
        print(
            _row(
                f"`ls -l /proc/PID/fd` + `ss -tanp` ({2 * args.sockets} sockets)",
                [_manual_fds(pid) for _ in range(args.repeat)],
            )
        )
        print(
            _row(
                f"`rankscope fds PID` ({2 * args.sockets} sockets)",
                [_timed(rankscope) for _ in range(args.repeat)],
            )
        )
    finally:
        _stop(holder)
    busy, pid = _start(BUSY)
    try:
        print(
            _row(
                f"bare `strace -f` for {args.seconds:g} s",
                [_bare_strace(pid, args.seconds) for _ in range(args.repeat)],
            )
        )
        rankscope = [sys.executable, "-m", "rankscope", "strace", str(pid), "--seconds", str(args.seconds)]
        print(
            _row(
                f"`rankscope strace --seconds {args.seconds:g}`",
                [_timed(rankscope) for _ in range(args.repeat)],
            )
        )
        # How many calls the busy target made in the last run, from rankscope's own count.
        json_out = _timed([*rankscope, "--json"])[1]
        import json

        calls = sum(count["calls"] for count in json.loads(json_out)["processes"][0]["syscalls"])
        print(f"\ncalls traced by rankscope in {args.seconds:g} s: {calls}")
    finally:
        _stop(busy)


if __name__ == "__main__":
    main()
