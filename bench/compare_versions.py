"""Every benchmark of docs/benchmarks.md's side-by-side rule: this checkout against a git revision, in one run.

    .venv/bin/python bench/compare_versions.py --before c67cdef
    .venv/bin/python bench/compare_versions.py --before HEAD --runs 2 --ranks 4 --log-mb 32 --merge-ranks 10000

The revision's ``src`` and ``pyproject.toml`` are exported (``git archive``: nothing is added to
the repository's list of worktrees) into a private temporary directory, removed at the end, on
Ctrl-C or SIGTERM, and by rankscope's guardian if this process is killed. Then, each version from
its own ``src`` through its own entry point, old and new alternating, the order reversed every
other round:

- ``stacks``: ``rankscope stacks --pid L`` on one hung torchrun job of ``--ranks`` ranks
  (bench/bench_stacks.py), and ``native``: the same with ``--native``;
- ``merge``: grouping, diagnosis and rendering of ``--merge-ranks`` synthetic snapshots;
- ``logs``: ``rankscope logs errors LOG --json`` on the generated 512-rank log of ``--log-mb`` MB
  (bench/bench_logs.py, pinned to one core).

It prints one markdown table: medians of CPU time (user + system of the command and of everything
it started, bench/sidebyside.py) and wall time for both versions, new / old, and a flag where the
new version's CPU median is more than 5% over the old one's. Exit status 0: no slowdown over 5%;
1: at least one; 2: a benchmark failed. Each benchmark runs in a session of its own, its hung job
with it; all of it is ended when this process ends, however it ends.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from rankscope import lifetime  # noqa: E402
from sidebyside import SLOWDOWN, Comparison, load, markdown_table  # noqa: E402

BENCHMARKS = ("stacks", "native", "merge", "logs")


def git(*argv: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *argv], capture_output=True, text=True, check=True
    ).stdout.strip()


def export(rev: str, dest: Path) -> str:
    """``rev``'s src and pyproject.toml under ``dest``; its full commit id."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "src", "pyproject.toml"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return commit


def run_bench(script: str, before_src: str, scratch: Path, options: list[str]) -> list[Comparison]:
    """One benchmark script, its version comparisons. It runs in a session of its own (Ctrl-C
    reaches this process only) and is ended, with everything it started, if this process stops first."""
    found = scratch / f"{script}.json"
    argv = [
        sys.executable,
        str(ROOT / "bench" / script),
        "--before-src",
        before_src,
        "--json-out",
        str(found),
    ]
    argv += options
    print(f"\n$ {' '.join(argv)}", flush=True)
    with lifetime.start(argv, None, capture=None, grace=10.0) as child:
        code = child.process.wait()
    if code != 0:
        raise SystemExit(f"{script} failed (exit {code})")
    return load(found)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="git revision of the old version")
    parser.add_argument("--runs", type=int, default=5, help="alternating runs of each version (medians)")
    parser.add_argument("--ranks", type=int, default=16, help="ranks of the hung job for stacks")
    parser.add_argument("--log-mb", type=int, default=1024, help="size of the generated log for logs errors")
    parser.add_argument("--merge-ranks", type=int, default=100_000, help="synthetic snapshots merged")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    args = parser.parse_args()
    started = time.monotonic()
    # Ctrl-C ends the run even where it started with SIGINT ignored (`cmd &` in a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    comparisons: list[Comparison] = []
    try:
        with lifetime.sigterm_raises(), lifetime.private_tempdir("rankscope-compare-") as tmp:
            scratch = Path(tmp)
            commit = export(args.before, scratch / "before")
            before_src = str(scratch / "before" / "src")
            head = git("rev-parse", "--short", "HEAD")
            dirty = " with uncommitted changes" if git("status", "--porcelain", "--", "src") else ""
            print(f"new: this checkout ({ROOT}, {head}{dirty}); old: {args.before} ({commit})", flush=True)
            load_start = os.getloadavg()[0]
            modes = [mode for mode, name in (("no", "stacks"), ("yes", "native")) if name in args.only]
            merge = args.merge_ranks if "merge" in args.only else 0
            if modes or merge:
                argv = ["--merge-ranks", str(merge), "--merge-repeat", str(args.runs)]
                if modes:
                    argv += ["--ranks", str(args.ranks), "--modes", *modes, "--no-manual", "--timeout", "120"]
                    argv += ["--repeat", str(args.runs), "--native-repeat", str(args.runs)]
                else:
                    argv += ["--merge-only"]
                comparisons += run_bench("bench_stacks.py", before_src, scratch, argv)
            if "logs" in args.only:
                argv = ["--size-mb", str(args.log_mb), "--runs", str(args.runs), "--commands", "errors"]
                comparisons += run_bench("bench_logs.py", before_src, scratch, [*argv, "--no-baselines"])
    except SystemExit as failed:
        print(f"compare_versions: {failed}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as failed:
        print(f"compare_versions: {' '.join(failed.cmd)}: {failed.stderr.strip()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: everything started is ended, the export removed
        print("compare_versions: interrupted; everything it started is ended", file=sys.stderr)
        return 130
    minutes = (time.monotonic() - started) / 60
    print(
        f"\n## new ({head}{dirty}) against old ({args.before}, {commit[:12]}): medians of {args.runs} "
        f"alternating runs\n\n{os.cpu_count()} CPUs, load average {load_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end; {minutes:.1f} minutes in all.\n"
    )
    print(markdown_table(comparisons))
    slower = [c.name for c in comparisons if c.slower]
    if slower:
        print(f"\nCPU time more than {SLOWDOWN:.0%} over the old version's: {', '.join(slower)}")
        return 1
    print(f"\nNo benchmark's CPU time is more than {SLOWDOWN:.0%} over the old version's.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
