"""Benchmark `rankscope stacks` against the manual py-spy pipeline, side by side in one run.

    python bench/bench_stacks.py                # 8 and 16 ranks: no --native, --native, --native-all; + merge scale
    python bench/bench_stacks.py --ranks 16 --repeat 5
    python bench/bench_stacks.py --ranks 16 --repeat 7 --native-repeat 0 --before-src /tmp/before/src
    python bench/bench_stacks.py --merge-only

Baseline: `pgrep -P <launcher> | xargs -I {} py-spy dump --pid {}` (and with --native), the
command users run today; rankscope's --native (native dumps of representatives only) and
--native-all (every rank) are timed against the same --native pipeline runs. rankscope is timed as a whole CLI run (interpreter start-up,
discovery, parallel dumps, merge, render). Results are medians of --repeat alternating runs;
--before-src DIR also times the rankscope of another checkout (DIR is its src, put first on
PYTHONPATH) in the same loop, so the previous version sees the same minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

BIN = Path(sys.executable).parent


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds (user+sys of the children it waited for) of one run, and its stdout."""
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    return elapsed, cpu, proc.stdout


#: rankscope's modes, by the flag they add: Python stacks only, --native (representatives), --native-all.
MODES = {"no": [], "yes": ["--native"], "all": ["--native-all"]}


def compare(
    launcher: int, modes: list[str], repeat: int, other_srcs: Sequence[Path] = ()
) -> list[dict[str, object]]:
    """The manual pipeline (with --native when any mode is native) and each rankscope mode, alternating;
    each mode also from every checkout's src in ``other_srcs`` (the previous version), in the same loop."""
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", RUST_BACKTRACE="0")
    flag = " --native" if modes != ["no"] else ""
    manual = ["bash", "-c", f"pgrep -P {launcher} | xargs -I {{}} py-spy dump{flag} --pid {{}}"]
    runs: dict[str, tuple[list[str], dict[str, str]]] = {}
    for mode in modes:
        argv = [str(BIN / "rankscope"), "stacks", "--pid", str(launcher), "--no-color", *MODES[mode]]
        runs[mode] = (argv, env)
        for number, src in enumerate(other_srcs, start=1):
            runs[f"{mode} [src {number}]"] = (argv, dict(env, PYTHONPATH=str(src)))
    manual_times: list[float] = []
    manual_cpu: list[float] = []
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    manual_out = ""
    our_out: dict[str, str] = {}
    for _ in range(repeat):
        seconds, cpu_s, manual_out = timed(manual, env)
        manual_times.append(seconds)
        manual_cpu.append(cpu_s)
        for name, (argv, run_env) in runs.items():
            seconds, cpu_s, our_out[name] = timed(argv, run_env)
            wall[name].append(seconds)
            cpu[name].append(cpu_s)
    m = statistics.median(manual_times)
    rows: list[dict[str, object]] = []
    for name in runs:
        o = statistics.median(wall[name])
        rows.append(
            {
                "native": name,
                "manual_s": m,
                "rankscope_s": o,
                "ratio": o / m,
                "rankscope_cpu_s": statistics.median(cpu[name]),
                "manual_cpu_s": statistics.median(manual_cpu),
                "rankscope_min_max_s": [min(wall[name]), max(wall[name])],
                "manual_min_max_s": [min(manual_times), max(manual_times)],
                "manual_lines": len(manual_out.splitlines()),
                "rankscope_lines": len(our_out[name].splitlines()),
            }
        )
    return rows


def bench_jobs(
    ranks_list: list[int], repeat: int, native_repeat: int, other_srcs: Sequence[Path] = ()
) -> list[dict[str, object]]:
    from rankscope.demo.launch import start_torchrun

    rows: list[dict[str, object]] = []
    for ranks in ranks_list:
        job = start_torchrun(nproc=ranks, script_args=["--scenario", "lock", "--culprit", str(ranks // 2)])
        try:
            job.wait_ready(timeout=600, settle=1.0)
            for modes, times in ((["no"], repeat), (["yes", "all"], native_repeat)):
                if times < 1:
                    continue
                for row in compare(job.pid, modes, times, other_srcs):
                    row = {"ranks": ranks, **row, "load_1m": os.getloadavg()[0]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            job.stop()
    return rows


def merge_scale(ranks: int) -> dict[str, float]:
    """Group, diagnose and render `ranks` synthetic snapshots in a child; report time and peak RSS."""
    code = f"""
import sys, time, json
sys.path.insert(0, {str(ROOT / "src")!r})
from rankscope.model import Frame, ProcessSnapshot, RankId, ThreadStack
from rankscope.stacks.merge import group_snapshots
from rankscope.stacks.analyse import diagnose
from rankscope.stacks.render import render_text
from rankscope.stacks.report import ProcessInfo, StacksReport
SITE = "/venv/lib/python3.11/site-packages/"
def chain(tag, n=30):
    frames = [Frame(f"{{tag}}_f{{i}}", f"/job/{{tag}}.py", 10 + i) for i in range(n - 3)]
    return tuple(frames + [Frame("sync", "/job/train.py", 30),
        Frame("wrapper", SITE + "torch/distributed/c10d_logger.py", 83),
        Frame("all_reduce", SITE + "torch/distributed/distributed_c10d.py", 3252)])
common = [chain(f"path{{k}}") for k in range(5)]
bg = (Frame("_bootstrap", "/usr/lib/python3.11/threading.py", 1002), Frame("heartbeat", "/job/hb.py", 5))
t0 = time.perf_counter()
snaps = []
for r in range({ranks}):
    if r % 20000 == 7:   # a few unique stacks: the ranks that are elsewhere
        frames = tuple(Frame(f"odd{{r}}_{{i}}", "/job/odd.py", i) for i in range(30))
    else:
        frames = common[r % 5]
    host = f"node{{r // 8:05d}}"
    snaps.append(ProcessSnapshot(pid=1000 + r % 8, rank=RankId(host, r, r % 8, {ranks}), threads=[
        ThreadStack(r, "MainThread", frames, is_main=True), ThreadStack(r + 1, "heartbeat-0", bg)]))
t1 = time.perf_counter()
report = StacksReport(groups=group_snapshots(snaps), hosts=sorted({{s.rank.host for s in snaps[::8]}}))
report.processes = [ProcessInfo(s.pid, s.rank) for s in snaps]
diagnosis = diagnose(report)
text = render_text(report, diagnosis)
t2 = time.perf_counter()
print(json.dumps({{"build_s": t1 - t0, "merge_render_s": t2 - t1, "groups": len(report.groups),
                  "divergent": len(diagnosis.divergent_ranks), "report_lines": len(text.splitlines())}}))
"""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = json.loads(proc.stdout)
    result["peak_rss_mib"] = max(peak_kib, before) / 1024
    result["ranks"] = ranks
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="*", default=[8, 16])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--native-repeat", type=int, default=None, help="runs with --native (default: repeat // 2; 0: none)"
    )
    parser.add_argument(
        "--before-src",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="also run rankscope from this checkout's src (PYTHONPATH), alternating in the same loop; "
        "repeatable: the rows name them [src 1], [src 2], ...",
    )
    parser.add_argument("--merge-ranks", type=int, default=100_000)
    parser.add_argument("--merge-only", action="store_true")
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, load {os.getloadavg()}", flush=True
    )
    # Measure rankscope as installed: with compiled bytecode, even where PYTHONDONTWRITEBYTECODE is set.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "rankscope")], check=True)
    if not args.merge_only:
        native_repeat = max(1, args.repeat // 2) if args.native_repeat is None else args.native_repeat
        for number, src in enumerate(args.before_src, start=1):
            print(f"[src {number}]: {src}", flush=True)
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True)
        rows = bench_jobs(args.ranks, args.repeat, native_repeat, args.before_src)
        print(
            "\n| ranks | --native | manual pipeline (s) | rankscope (s) | ratio | CPU manual / rankscope (s) "
            "| lines manual | lines rankscope | fewer lines |"
        )
        print("|---:|:---:|---:|---:|---:|---:|---:|---:|---:|")
        for row in rows:
            print(
                f"| {row['ranks']} | {row['native']} | {row['manual_s']:.3f} | {row['rankscope_s']:.3f} "
                f"| {row['ratio']:.2f}x | {row['manual_cpu_s']:.3f} / {row['rankscope_cpu_s']:.3f} | {row['manual_lines']} | {row['rankscope_lines']} "
                f"| {int(row['manual_lines']) / max(1, int(row['rankscope_lines'])):.1f}x |"
            )
    merge = merge_scale(args.merge_ranks)
    print(
        f"\nmerge scale: {merge['ranks']} snapshots -> {merge['groups']} groups; build {merge['build_s']:.2f}s, "
        f"group+diagnose+render {merge['merge_render_s']:.2f}s, peak RSS {merge['peak_rss_mib']:.0f} MiB, "
        f"{merge['report_lines']} report lines"
    )


if __name__ == "__main__":
    main()
