"""What `rankscope watch` costs when the ranks' flight recorders are its stall signal.

    python bench/bench_watch_fr.py                          # 16 ranks, 60 s per watcher
    python bench/bench_watch_fr.py --nproc 4 --seconds 20 --stalls 60

The job: torchrun with ``--nproc`` gloo ranks (``RANKSCOPE_INPROC=1``), each doing an
``all_reduce`` every 0.1 s, with neither progress markers nor output files (torchrun's and the
ranks' output go to /dev/null): the watcher's only stall signal is the ranks' recorders, read with
the in-process handler's ``fr_status`` request every quarter of ``--stall`` (at most 15 s, at least
one look). One watcher after another attaches to it (``rankscope watch --pid LAUNCHER --stall S``),
one per ``--stalls`` value; each one's CPU time (its own and its reaped children's, from
/proc/PID/stat) is read 2 s after it started and again ``--seconds`` later.

Beside them, two costs measured directly: one ask of every rank as the watcher makes it
(``RecorderLooks``, CPU time of this process), and, inside rank 0 once every rank has done 2,000
all_reduces (the recorder's ring full), the ``fr_status`` answer against torch's full JSON dump of
the ring (CPU time of the rank).

Every process started here is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_watch import cpu_seconds, stop_group  # noqa: E402

#: torch 2.13's default recorder size (TORCH_FR_BUFFER_SIZE).
RING = 2000


def worker(scratch: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(4)
    for _ in range(RING):  # the recorder's ring full, as in a job that ran a while
        dist.all_reduce(tensor)
    rank = dist.get_rank()
    if rank == 0:
        in_rank_costs(scratch)
    Path(scratch, f"ready.{rank}").touch()
    while True:
        dist.all_reduce(tensor)
        time.sleep(0.1)


def in_rank_costs(scratch: Path) -> None:
    """The rank's CPU time for ``fr_status``'s answer and for torch's full JSON dump (a ring of RING)."""
    import torch._C._distributed_c10d as c10d

    from rankscope.inproc.frstatus import recorder_status

    def per_call(call: object, times: int) -> float:
        start = time.process_time()
        for _ in range(times):
            call()  # type: ignore[operator]
        return (time.process_time() - start) / times

    status = per_call(lambda: recorder_status({}), 2000)
    full = per_call(lambda: c10d._dump_fr_trace_json(True, False), 5)
    Path(scratch, "in_rank.txt").write_text(f"{status} {full} {recorder_status({})}")


def ask_cost(launcher: int, times: int) -> float:
    """This process's CPU seconds for one ask of every rank's recorder, as the watcher makes it."""
    from rankscope.watch.collect import find_workers
    from rankscope.watch.recorders import RecorderLooks

    workers = find_workers([launcher])
    looks = RecorderLooks(period=0.0)
    start = time.process_time()
    for index in range(times):
        looks.look(float(index), workers)
    if len(looks.numbers) != len(workers):
        raise RuntimeError(f"only {len(looks.numbers)} of {len(workers)} ranks answered")
    return (time.process_time() - start) / times


def watch_cost(launcher: int, stall: float, seconds: float, scratch: Path) -> tuple[float, str]:
    log = Path(scratch, f"watch-{stall:g}.log")
    argv = [sys.executable, "-m", "rankscope", "watch", "--pid", str(launcher), "--stall", f"{stall:g}"]
    argv += ["--out", str(Path(scratch, f"caps-{stall:g}"))]
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=out, start_new_session=True)
    try:
        time.sleep(2)
        start = cpu_seconds(process.pid)
        time.sleep(seconds)
        return cpu_seconds(process.pid) - start, log.read_text(errors="replace")
    finally:
        stop_group(process)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--stalls", type=float, nargs="+", default=[60.0, 8.0, 4.0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker))
        return
    with tempfile.TemporaryDirectory(prefix="rankscope-bench-watch-fr-") as scratch:
        env = {**os.environ, "RANKSCOPE_INPROC": "1", "OMP_NUM_THREADS": "1"}
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        torchrun += ["--nproc-per-node", str(args.nproc), __file__, "--worker", scratch]
        job = subprocess.Popen(
            torchrun,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            until = time.monotonic() + 600
            while len(list(Path(scratch).glob("ready.*"))) < args.nproc:
                if time.monotonic() > until or job.poll() is not None:
                    raise RuntimeError("the job did not start")
                time.sleep(0.5)
            status, full, answer = Path(scratch, "in_rank.txt").read_text().split(" ", 2)
            per_ask = ask_cost(job.pid, 20)
            results = [
                (stall, *watch_cost(job.pid, stall, args.seconds, Path(scratch))) for stall in args.stalls
            ]
        finally:
            stop_group(job, 30)
    from rankscope.watch.recorders import cadence

    print(f"{args.nproc} gloo ranks, all_reduce every 0.1 s, no markers, no output files")
    print(
        f"  inside rank 0: fr_status {1e6 * float(status):.1f} us CPU; full JSON dump {1e3 * float(full):.1f} ms"
    )
    print(f"  rank 0's answer: {answer}")
    print(f"  one ask of all {args.nproc} ranks by the watcher: {1e3 * per_ask:.1f} ms CPU")
    for stall, used, log in results:
        every = cadence(stall, 1.0)
        print(
            f"  rankscope watch --stall {stall:g} (recorders every {every:g} s): {used:.2f} CPU s in "
            f"{args.seconds:g} s = {100 * used / args.seconds:.2f}% of one core"
        )
        for line in log.splitlines():
            print(f"    watcher said: {line}")


if __name__ == "__main__":
    main()
