"""Benchmark `rankscope logs errors` and `logs grep` against the manual baselines, side by side.

Usage: python bench/bench_logs.py [--size-mb 1024] [--runs 3] [--keep] [--before-src DIR] [--unlocked P]
                                  [--commands errors grep ranks] [--no-baselines] [--json-out FILE]

Generates the interleaved 512-rank log with bench/gen_logs.py (into bench/out/), warms the page
cache, then runs every command pinned to one core (taskset -c 0), best of --runs. For each it
prints wall time, CPU time (user+sys of the command and of everything it started, whatever else
the machine was doing: bench/sidebyside.py), MB/s on both, and peak RSS (of its largest process;
about 16 MB at least, the measuring wrapper's, which a command inherits at exec: GNU time's floor was 2 MB).

``--before-src DIR`` (the ``src`` of another checkout, e.g. ``git worktree add /tmp/before
HEAD~1``) also runs each rankscope command from that tree, through that checkout's own entry
point: before and after side by side, in the same run. The runs go round-robin (every command
once, then again, the order reversed every other round), so a busy spell on the machine weighs on
all of them alike; the version table gives the medians, after / before, and flags a CPU slowdown
over 5%. ``bench/compare_versions.py`` runs this and bench_stacks.py against a git revision.

``--unlocked P`` benchmarks the log as ranks printing without a lock leave it (see
``gen_logs.py``): what repairing write-interleaved lines costs.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from gen_logs import generate  # noqa: E402
from rankscope import lifetime  # noqa: E402
from sidebyside import Comparison, Sample, alternate, make_side, markdown_table, measure, save  # noqa: E402

RANK = "node017:137"


def best(results: list[Sample]) -> tuple[float, float, int]:
    return min(r.wall_s for r in results), min(r.cpu_s for r in results), max(r.maxrss_kib for r in results)


#: Each ``rankscope logs`` command timed, by its group, with the baselines it is compared with.
def commands(log: Path) -> dict[str, tuple[list[str], list[tuple[str, list[str]]]]]:
    py = sys.executable
    naive_errors = (
        "import sys, collections\n"
        "c = collections.Counter(l.split(b']:', 1)[-1].strip() for l in open(sys.argv[1], 'rb') "
        "if b'Error' in l and not l.split(b']:', 1)[-1].startswith(b' '))\n"
        "print(len(c))"
    )
    return {
        "errors": (
            ["logs", "errors", str(log), "--json"],
            [
                ("baseline: grep -c Traceback LOG", ["grep", "-c", "Traceback", str(log)]),
                ("baseline: python Counter of *Error lines", [py, "-c", naive_errors, str(log)]),
            ],
        ),
        "grep": (
            ["logs", "grep", "--rank", RANK, str(log)],
            [(f"baseline: grep -F '[{RANK}]' LOG", ["grep", "-F", f"[{RANK}]", str(log)])],
        ),
        "ranks": (
            ["logs", "ranks", str(log), "--json"],
            [
                (
                    "baseline: grep -o '^\\[[^]]*\\]' LOG | sort | uniq -c",
                    ["bash", "-c", f"grep -o '^\\[[^]]*\\]' {shlex.quote(str(log))} | sort | uniq -c"],
                )
            ],
        ),
    }


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
    parser.add_argument(
        "--commands", nargs="+", choices=["errors", "grep", "ranks"], default=["errors", "grep", "ranks"]
    )
    parser.add_argument("--no-baselines", action="store_true", help="Only rankscope's commands.")
    parser.add_argument("--json-out", type=Path, help="Write the version comparisons here (JSON).")
    args = parser.parse_args()
    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    kind = f"-unlocked{args.unlocked:g}" if args.unlocked else ""
    log = out_dir / f"bench-{args.size_mb}mb{kind}.log"
    if not args.keep:  # removed at the end, on Ctrl-C or SIGTERM, and by the guardian if this is killed
        lifetime.note_path(str(log))
    with lifetime.sigterm_raises():
        try:
            if not log.exists():
                print(f"generating {log} ...", flush=True)
                generate(log, args.size_mb, unlocked_chance=args.unlocked)
            with lifetime.private_tempdir("rankscope-bench-logs-") as tmp:
                bench(args, log, Path(tmp))
        finally:
            if not args.keep:
                log.unlink(missing_ok=True)


def bench(args: argparse.Namespace, log: Path, scratch: Path) -> None:
    size = log.stat().st_size
    with open(log, "rb") as handle:  # warm the page cache: measure parsing, not the disk
        while handle.read(16 << 20):
            pass
    sides = [make_side("new", HERE.parent / "src", scratch)]
    if args.before_src is not None:
        sides.append(make_side("old", args.before_src, scratch))
    rows: dict[str, tuple[list[str], Mapping[str, str]]] = {}
    for group, (verb, baselines) in commands(log).items():
        if group in args.commands:
            for side in sides:
                name = f"{'(before) ' if side.label == 'old' else ''}rankscope {' '.join(verb)}"
                rows[name.replace(str(log), "LOG")] = ([*side.rankscope, *verb], side.env)
            if not args.no_baselines:
                rows.update({name: (argv, sides[0].env) for name, argv in baselines})
    print(f"log: {size / 1e6:.0f} MB, 512 ranks, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    runs = alternate(
        {
            name: (lambda argv=argv, env=env: measure(argv, env, scratch / "stdout", pin=True))
            for name, (argv, env) in rows.items()
        },
        args.runs,
    )
    print(f"{'command':<61} {'wall s':>7} {'MB/s':>7} {'cpu s':>7} {'MB/s cpu':>9} {'peak RSS':>9}")
    results: dict[str, tuple[float, float, int]] = {}
    for name in rows:
        wall, cpu, rss = best(runs[name])
        wall, cpu = max(wall, 0.001), max(cpu, 0.001)
        results[name] = (wall, cpu, rss)
        print(
            f"{name:<61} {wall:>7.2f} {size / 1e6 / wall:>7.0f} {cpu:>7.2f} {size / 1e6 / cpu:>9.0f} "
            f"{rss / 1024:>7.0f}MB"
        )
    grep_name, grep_base = f"rankscope logs grep --rank {RANK} LOG", f"baseline: grep -F '[{RANK}]' LOG"
    if grep_name in results and grep_base in results:
        ours, base = results[grep_name], results[grep_base]
        print(f"logs grep / grep -F: {ours[0] / base[0]:.2f}x wall, {ours[1] / base[1]:.2f}x cpu")
    comparisons = [
        Comparison(
            f"{name.removeprefix('rankscope ').replace(' LOG', '')}, {size / 1e6:.0f} MB log",
            runs[f"(before) {name}"],
            runs[name],
        )
        for name in rows
        if f"(before) {name}" in rows
    ]
    if comparisons:
        print(
            f"\nthis checkout (new) against {args.before_src} (old), medians, load {os.getloadavg()[0]:.1f}:\n"
        )
        print(markdown_table(comparisons))
    if args.json_out is not None:
        save(comparisons, args.json_out)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the log was removed on the way out
        sys.exit("bench_logs: interrupted")
