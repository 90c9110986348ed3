"""What `rankscope watch` costs a healthy job: the watcher's own CPU time while it watches.

    python bench/bench_watch.py                     # 16 ranks, 30 s of watching
    python bench/bench_watch.py --nproc 4 --seconds 10

The job is a launcher script and ``--nproc`` plain Python workers with torchrun's rank variables
(no torch: the watcher reads /proc and the ranks' files, and a rank's framework changes nothing it
reads), each marking a step with ``rankscope.progress`` every 0.1 s and printing a line into the
job's log file, as a healthy training loop does. The watcher runs it (``rankscope watch --stall 60 --
python this-file --job``); its CPU time (utime + stime of its process and of the children it reaped, from /proc/PID/stat; the
job is reaped only at its end) is
read once the workers mark their first steps and again ``--seconds`` later: the cost of watching,
without its start-up. Beside it, the manual baseline a person would run instead: a shell loop
``while sleep 1; do tail -c 200 LOG; done`` (the cheapest look at a job's progress from outside).

Every process started here is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        raw = handle.read()
    fields = raw[raw.rindex(b")") + 2 :].split()
    return sum(int(value) for value in fields[11:15]) / TICK  # its own and its reaped children's


def worker() -> None:
    import rankscope

    step = 0
    while True:
        rankscope.progress(step=step)
        print(f"rank {os.environ['RANK']} step {step}", flush=True)
        step += 1
        time.sleep(0.1)


def job(nproc: int) -> None:
    workers = []
    for rank in range(nproc):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(rank)}
        env.update(LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT="29999")
        workers.append(subprocess.Popen([sys.executable, __file__, "--worker"], env=env))
    signal.signal(signal.SIGTERM, lambda *_: [w.terminate() for w in workers])
    for process in workers:
        process.wait()


def measure(argv: list[str], log: Path, seconds: float, ready: str) -> float:
    """CPU seconds ``argv`` spends in ``seconds`` of watching, from the moment ``ready`` is in the log."""
    with open(log, "ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=out, start_new_session=True)
    try:
        until = time.monotonic() + 120
        while ready not in log.read_text(errors="replace"):
            if time.monotonic() > until or process.poll() is not None:
                raise RuntimeError(f"the job did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        time.sleep(2)  # the watcher's first scans done
        start = cpu_seconds(process.pid)
        time.sleep(seconds)
        return cpu_seconds(process.pid) - start
    finally:
        stop_group(process)


def stop_group(process: subprocess.Popen[bytes], grace: float = 10) -> None:
    """SIGTERM to the process group ``process`` leads; SIGKILL after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    if args.job:
        job(args.nproc)
        return
    with tempfile.TemporaryDirectory(prefix="rankscope-bench-watch-") as scratch:
        log = Path(scratch, "job.log")
        job_argv = [sys.executable, __file__, "--job", "--nproc", str(args.nproc)]
        watch = [
            sys.executable,
            "-m",
            "rankscope",
            "watch",
            "--stall",
            "60",
            "--out",
            f"{scratch}/caps",
            "--",
        ]
        used = measure([*watch, *job_argv], log, args.seconds, f"rank {args.nproc - 1} step 1")
        with open(log, "ab") as out:
            ran = subprocess.Popen(job_argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            tail = ["sh", "-c", f"while sleep 1; do tail -c 200 {log} > /dev/null; done"]
            shell = measure(tail, log, args.seconds, f"rank {args.nproc - 1} step 1")
        finally:
            os.killpg(ran.pid, signal.SIGTERM)
            ran.wait()
        captures = sorted(p.name for p in Path(scratch, "caps").iterdir())
    print(f"{args.nproc} ranks, {args.seconds:g} s of watching a healthy job")
    print(
        f"  rankscope watch (interval 1 s): {used:.2f} CPU s = {100 * used / args.seconds:.2f}% of one core"
    )
    print(
        f"  shell loop tail -c every 1 s:   {shell:.2f} CPU s = {100 * shell / args.seconds:.2f}% of one core"
    )
    print(f"  captures taken: {captures or 'none'}")


if __name__ == "__main__":
    main()
