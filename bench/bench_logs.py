"""Benchmark `rankscope logs errors` and `logs grep` against the manual baselines, side by side.

Usage: python bench/bench_logs.py [--size-mb 1024] [--runs 3] [--keep] [--before-src DIR] [--unlocked P]

Needs GNU time on PATH (Debian package ``time``: /usr/bin/time). Generates the interleaved 512-rank log with
bench/gen_logs.py (into bench/out/), warms the page cache, then runs every command pinned to
one core (taskset -c 0), best of --runs. For each it prints wall time, CPU time (user+sys:
what the command itself cost, whatever else the machine was doing), MB/s on both, and peak
RSS (as GNU time reports it for that command).

``--before-src DIR`` (the ``src`` of another checkout, e.g. ``git worktree add /tmp/before
HEAD~1``) also runs each rankscope command from that tree: before and after side by side, in
the same run. The runs go round-robin (every command once, then again), so a busy spell on the
machine weighs on all of them alike.

``--unlocked P`` benchmarks the log as ranks printing without a lock leave it (see
``gen_logs.py``): what repairing write-interleaved lines costs.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gen_logs import generate  # noqa: E402

RANK = "node017:137"
#: GNU time (not the shell keyword): the first ``time`` executable on PATH.
GNU_TIME = shutil.which("time") or "/usr/bin/time"


def run(argv: list[str], scratch: Path, env: Optional[dict[str, str]] = None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds, peak RSS (KiB) of one run.

    Output goes to a scratch file, not /dev/null: GNU grep stops at the first match when its
    output is /dev/null. GNU time measures the command itself (a fork of this Python
    process would report this process's RSS as the child's peak).
    """
    pinned = ["taskset", "-c", "0", *argv] if shutil.which("taskset") else argv
    stats = scratch / "time.txt"
    with open(scratch / "stdout", "wb") as sink:
        proc = subprocess.run(
            [GNU_TIME, "-f", "%e %U %S %M", "-o", str(stats), *pinned],
            stdout=sink,
            stderr=subprocess.PIPE,
            env=env,
        )
    if proc.returncode not in (0, 1):  # grep -c exits 1 on no match
        raise SystemExit(f"{argv} failed: {proc.stderr.decode()}")
    wall, user, system, rss = stats.read_text().split()[-4:]
    return float(wall), float(user) + float(system), int(rss)


def best(results: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    return min(r[0] for r in results), min(r[1] for r in results), max(r[2] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="Keep the generated log.")
    parser.add_argument(
        "--before-src", type=Path, help="Also run rankscope from this src tree (before a change)."
    )
    parser.add_argument("--unlocked", type=float, default=0.0, help="Chance of a late newline.")
    args = parser.parse_args()
    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    kind = f"-unlocked{args.unlocked:g}" if args.unlocked else ""
    log = out_dir / f"bench-{args.size_mb}mb{kind}.log"
    if not log.exists():
        print(f"generating {log} ...", flush=True)
        generate(log, args.size_mb, unlocked_chance=args.unlocked)
    size = log.stat().st_size
    with open(log, "rb") as handle:  # warm the page cache: measure parsing, not the disk
        while handle.read(16 << 20):
            pass
    py = sys.executable
    rankscope = [py, "-m", "rankscope"]
    naive_errors = (
        "import sys, collections\n"
        "c = collections.Counter(l.split(b']:', 1)[-1].strip() for l in open(sys.argv[1], 'rb') "
        "if b'Error' in l and not l.split(b']:', 1)[-1].startswith(b' '))\n"
        "print(len(c))"
    )
    rows = [
        (
            "logs errors",
            "rankscope logs errors LOG --json",
            [*rankscope, "logs", "errors", str(log), "--json"],
        ),
        ("logs errors", "baseline: grep -c Traceback LOG", ["grep", "-c", "Traceback", str(log)]),
        ("logs errors", "baseline: python Counter of *Error lines", [py, "-c", naive_errors, str(log)]),
        (
            "logs grep",
            f"rankscope logs grep --rank {RANK} LOG",
            [*rankscope, "logs", "grep", "--rank", RANK, str(log)],
        ),
        ("logs grep", f"baseline: grep -F '[{RANK}]' LOG", ["grep", "-F", f"[{RANK}]", str(log)]),
        ("logs ranks", "rankscope logs ranks LOG --json", [*rankscope, "logs", "ranks", str(log), "--json"]),
        (
            "logs ranks",
            "baseline: grep -o '^\\[[^]]*\\]' LOG | sort | uniq -c",
            ["bash", "-c", f"grep -o '^\\[[^]]*\\]' {shlex.quote(str(log))} | sort | uniq -c"],
        ),
    ]
    envs: dict[str, Optional[dict[str, str]]] = {name: None for _group, name, _argv in rows}
    if args.before_src is not None:
        before = {**os.environ, "PYTHONPATH": str(args.before_src.resolve())}
        for group, name, argv in list(rows):
            if not name.startswith("baseline"):
                rows.insert(rows.index((group, name, argv)) + 1, (group, f"(before) {name}", argv))
                envs[f"(before) {name}"] = before
    print(f"log: {size / 1e6:.0f} MB, 512 ranks, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    runs: dict[str, list[tuple[float, float, int]]] = {name: [] for _group, name, _argv in rows}
    for _ in range(args.runs):
        for _group, name, argv in rows:
            runs[name].append(run(argv, out_dir, envs[name]))
    print(f"{'command':<61} {'wall s':>7} {'MB/s':>7} {'cpu s':>7} {'MB/s cpu':>9} {'peak RSS':>9}")
    results: dict[str, tuple[float, float, int]] = {}
    for _group, name, _argv in rows:
        wall, cpu, rss = best(runs[name])
        wall, cpu = max(wall, 0.01), max(cpu, 0.01)  # GNU time counts in 10 ms steps
        results[name] = (wall, cpu, rss)
        print(
            f"{name:<61} {wall:>7.2f} {size / 1e6 / wall:>7.0f} {cpu:>7.2f} {size / 1e6 / cpu:>9.0f} "
            f"{rss / 1024:>7.0f}MB"
        )
    grep_name = f"rankscope logs grep --rank {RANK} LOG"
    ours, base = results[grep_name], results[f"baseline: grep -F '[{RANK}]' LOG"]
    print(f"logs grep / grep -F: {ours[0] / base[0]:.2f}x wall, {ours[1] / base[1]:.2f}x cpu")
    for name in (n for n in results if n.startswith("(before) ")):
        after, before_run = results[name[len("(before) ") :]], results[name]
        print(f"{name[len('(before) ') :]}: after / before {after[1] / before_run[1]:.3f}x cpu")
    if not args.keep:
        log.unlink()


if __name__ == "__main__":
    main()
