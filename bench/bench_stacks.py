"""Benchmark `rankscope stacks` against the manual py-spy pipeline, side by side in one run.

    python bench/bench_stacks.py                # 8 and 16 ranks: no --native, --native, --native-all; + merge scale
    python bench/bench_stacks.py --ranks 16 --repeat 5
    python bench/bench_stacks.py --merge-only
    python bench/bench_stacks.py --ranks 16 --modes no yes --no-manual --before-src /tmp/before/src

Baseline: `pgrep -P <launcher> | xargs -I {} py-spy dump --pid {}` (and with --native), the
command users run today; rankscope's --native (native dumps of representatives only) and
--native-all (every rank) are timed against the same --native pipeline runs. rankscope is timed as a whole CLI run (interpreter start-up,
discovery, parallel dumps, merge, render). Results are medians of --repeat alternating runs, wall
time and CPU time (user + system of the command and of everything it started: bench/sidebyside.py).

``--before-src DIR`` (the ``src`` of another checkout) also runs each rankscope command, and the
merge, from that tree against the same job, alternating with this checkout's, and prints the
version table: medians of both, new / old, and a flag where CPU time grew more than 5%.
``--no-manual`` leaves the manual pipeline out (the version comparison does not need it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from sidebyside import Comparison, Sample, Side, alternate, make_side, markdown_table, measure, save  # noqa: E402

BIN = Path(sys.executable).parent


#: rankscope's modes, by the flag they add: Python stacks only, --native (representatives), --native-all.
MODES = {"no": [], "yes": ["--native"], "all": ["--native-all"]}


def compare(
    launcher: int,
    ranks: int,
    modes: list[str],
    repeat: int,
    sides: list[Side],
    manual: bool,
    scratch: Path,
    timeout: list[str],
) -> tuple[list[dict[str, object]], list[Comparison]]:
    """The manual pipeline (with --native when any mode is native) and each rankscope mode of each
    version, alternating. Rows for the table against the pipeline (this checkout), and the version
    comparisons (when there is a second side)."""
    env = dict(sides[0].env)
    flag = " --native" if modes != ["no"] else ""
    pipeline = ["bash", "-c", f"pgrep -P {launcher} | xargs -I {{}} py-spy dump{flag} --pid {{}}"]
    outputs = {"manual": scratch / "manual.out"}
    commands: dict[str, Callable[[], Sample]] = {}
    if manual:
        commands["manual"] = lambda: measure(pipeline, env, outputs["manual"])
    for mode in modes:
        for side in sides:
            name = f"{side.label} {mode}"
            argv = [*side.rankscope, "stacks", "--pid", str(launcher), "--no-color", *MODES[mode], *timeout]
            outputs[name] = scratch / f"{side.label}-{mode}.out"
            commands[name] = lambda argv=argv, side=side, out=outputs[name]: measure(argv, side.env, out)
    samples = alternate(commands, repeat)

    def lines(name: str) -> int:
        return len(outputs[name].read_text(errors="replace").splitlines()) if outputs[name].exists() else 0

    rows: list[dict[str, object]] = []
    comparisons: list[Comparison] = []
    m = statistics.median(s.wall_s for s in samples["manual"]) if manual else None
    for mode in modes:
        ours = samples[f"{sides[0].label} {mode}"]
        o = statistics.median(s.wall_s for s in ours)
        rows.append(
            {
                "native": mode,
                "manual_s": m,
                "rankscope_s": o,
                "ratio": o / m if m else None,
                "rankscope_cpu_s": statistics.median(s.cpu_s for s in ours),
                "manual_cpu_s": statistics.median(s.cpu_s for s in samples["manual"]) if manual else None,
                "rankscope_min_max_s": [min(s.wall_s for s in ours), max(s.wall_s for s in ours)],
                "manual_min_max_s": [
                    min(s.wall_s for s in samples["manual"]),
                    max(s.wall_s for s in samples["manual"]),
                ]
                if manual
                else None,
                "manual_lines": lines("manual") if manual else None,
                "rankscope_lines": lines(f"{sides[0].label} {mode}"),
            }
        )
        if len(sides) > 1:
            comparisons.append(
                Comparison(
                    f"stacks, {ranks} ranks {' '.join(MODES[mode])}".rstrip(),
                    old=samples[f"{sides[1].label} {mode}"],
                    new=ours,
                )
            )
    return rows, comparisons


def bench_jobs(
    ranks_list: list[int],
    groups: list[tuple[list[str], int]],
    sides: list[Side],
    manual: bool,
    scratch: Path,
    timeout: list[str],
) -> tuple[list[dict[str, object]], list[Comparison]]:
    from rankscope.demo.launch import start_torchrun

    rows: list[dict[str, object]] = []
    comparisons: list[Comparison] = []
    for ranks in ranks_list:
        job = start_torchrun(nproc=ranks, script_args=["--scenario", "lock", "--culprit", str(ranks // 2)])
        try:
            job.wait_ready(timeout=600, settle=1.0)
            for modes, times in groups:
                found, versions = compare(job.pid, ranks, modes, times, sides, manual, scratch, timeout)
                for row in found:
                    row = {"ranks": ranks, **row, "load_1m": os.getloadavg()[0]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                comparisons += versions
        finally:
            job.stop()
    return rows, comparisons


MERGE_CODE = """
import sys, time, json
from rankscope.model import Frame, ProcessSnapshot, RankId, ThreadStack
from rankscope.stacks.merge import group_snapshots
try:
    from rankscope.stacks.analyse import diagnose
except ImportError:  # a build before stacks.explain was split (bench --before-src)
    from rankscope.stacks.explain import diagnose
from rankscope.stacks.render import render_text
from rankscope.stacks.report import ProcessInfo, StacksReport
SITE = "/venv/lib/python3.11/site-packages/"
def chain(tag, n=30):
    frames = [Frame(f"{tag}_f{i}", f"/job/{tag}.py", 10 + i) for i in range(n - 3)]
    return tuple(frames + [Frame("sync", "/job/train.py", 30),
        Frame("wrapper", SITE + "torch/distributed/c10d_logger.py", 83),
        Frame("all_reduce", SITE + "torch/distributed/distributed_c10d.py", 3252)])
ranks = int(sys.argv[1])
common = [chain(f"path{k}") for k in range(5)]
bg = (Frame("_bootstrap", "/usr/lib/python3.11/threading.py", 1002), Frame("heartbeat", "/job/hb.py", 5))
t0 = time.perf_counter()
snaps = []
for r in range(ranks):
    if r % 20000 == 7:   # a few unique stacks: the ranks that are elsewhere
        frames = tuple(Frame(f"odd{r}_{i}", "/job/odd.py", i) for i in range(30))
    else:
        frames = common[r % 5]
    host = f"node{r // 8:05d}"
    snaps.append(ProcessSnapshot(pid=1000 + r % 8, rank=RankId(host, r, r % 8, ranks), threads=[
        ThreadStack(r, "MainThread", frames, is_main=True), ThreadStack(r + 1, "heartbeat-0", bg)]))
t1, c1 = time.perf_counter(), time.process_time()
report = StacksReport(groups=group_snapshots(snaps), hosts=sorted({s.rank.host for s in snaps[::8]}))
report.processes = [ProcessInfo(s.pid, s.rank) for s in snaps]
diagnosis = diagnose(report)
text = render_text(report, diagnosis)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"build_s": t1 - t0, "merge_render_s": t2 - t1, "merge_render_cpu_s": c2 - c1,
                  "groups": len(report.groups), "divergent": len(diagnosis.divergent_ranks),
                  "report_lines": len(text.splitlines())}))
"""


def merge_scale(ranks: int, side: Side, scratch: Path) -> tuple[dict[str, float], Sample]:
    """Group, diagnose and render `ranks` synthetic snapshots with ``side``'s rankscope, in a child;
    its time and peak RSS, and a sample of the grouping, diagnosis and rendering alone (wall, CPU)."""
    out = scratch / f"merge-{side.label}.json"
    whole = measure([sys.executable, "-c", MERGE_CODE, str(ranks)], side.env, out)
    result = json.loads(out.read_text())
    result["peak_rss_mib"] = whole.maxrss_kib / 1024
    result["ranks"] = ranks
    part = Sample(result["merge_render_s"], result["merge_render_cpu_s"], whole.maxrss_kib)
    return result, part


def print_pipeline_table(rows: list[dict[str, object]]) -> None:
    def num(value: object, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    print(
        "\n| ranks | --native | manual pipeline (s) | rankscope (s) | ratio | CPU manual (s) | CPU rankscope (s) "
        "| lines manual | lines rankscope | fewer lines |"
    )
    print("|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        fewer = (
            f"{int(row['manual_lines']) / max(1, int(row['rankscope_lines'])):.1f}x"
            if row["manual_lines"] is not None
            else "-"
        )
        print(
            f"| {row['ranks']} | {row['native']} | {num(row['manual_s'], '.3f')} | {num(row['rankscope_s'], '.3f')} "
            f"| {num(row['ratio'], '.2f')}x | {num(row['manual_cpu_s'], '.3f')} | {num(row['rankscope_cpu_s'], '.3f')} "
            f"| {num(row['manual_lines'], 'd')} | {row['rankscope_lines']} | {fewer} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="*", default=[8, 16])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--native-repeat", type=int, default=None, help="runs with --native (default: repeat // 2)"
    )
    parser.add_argument(
        "--modes", nargs="+", choices=list(MODES), default=list(MODES), help="no, yes (--native), all"
    )
    parser.add_argument(
        "--timeout", type=float, help="rankscope's --timeout per dump (both versions; default: rankscope's)"
    )
    parser.add_argument("--no-manual", action="store_true", help="Leave the manual pipeline out.")
    parser.add_argument("--merge-ranks", type=int, default=100_000, help="0: no merge scale")
    parser.add_argument("--merge-repeat", type=int, default=1, help="merge runs per version, alternating")
    parser.add_argument("--merge-only", action="store_true")
    parser.add_argument(
        "--before-src", type=Path, help="Also run rankscope from this src tree (before a change)."
    )
    parser.add_argument("--json-out", type=Path, help="Write the version comparisons here (JSON).")
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, load {os.getloadavg()}", flush=True
    )
    from rankscope import lifetime

    with lifetime.sigterm_raises(), lifetime.private_tempdir("rankscope-bench-stacks-") as tmp:
        scratch = Path(tmp)
        # Each side runs its own entry point, bytecode compiled, as an installed package has it.
        sides = [make_side("new", ROOT / "src", scratch, str(BIN))]
        if args.before_src is not None:
            sides.append(make_side("old", args.before_src, scratch, str(BIN)))
        comparisons: list[Comparison] = []
        if not args.merge_only:
            native_repeat = args.native_repeat or max(1, args.repeat // 2)
            plain = [m for m in args.modes if m == "no"]
            native = [m for m in args.modes if m != "no"]
            groups = [
                (modes, times) for modes, times in ((plain, args.repeat), (native, native_repeat)) if modes
            ]
            rows, comparisons = bench_jobs(
                args.ranks,
                groups,
                sides,
                not args.no_manual,
                scratch,
                [] if args.timeout is None else ["--timeout", str(args.timeout)],
            )
            print_pipeline_table(rows)
        if args.merge_ranks and args.merge_repeat > 0:
            merges = alternate(
                {
                    side.label: (lambda side=side: merge_scale(args.merge_ranks, side, scratch)[1])
                    for side in sides
                },
                args.merge_repeat,
            )
            result = json.loads((scratch / "merge-new.json").read_text())
            print(
                f"\nmerge scale: {args.merge_ranks} snapshots -> {result['groups']} groups; build {result['build_s']:.2f}s, "
                f"group+diagnose+render {statistics.median(s.wall_s for s in merges['new']):.2f}s "
                f"(CPU {statistics.median(s.cpu_s for s in merges['new']):.2f}s), "
                f"peak RSS {max(s.maxrss_kib for s in merges['new']) / 1024:.0f} MiB, "
                f"{result['report_lines']} report lines"
            )
            if len(sides) > 1:
                comparisons.append(
                    Comparison(f"merge, {args.merge_ranks} snapshots", merges["old"], merges["new"])
                )
        if comparisons:
            print(f"\nthis checkout (new) against {args.before_src} (old), load {os.getloadavg()[0]:.1f}:\n")
            print(markdown_table(comparisons))
        if args.json_out is not None:
            save(comparisons, args.json_out)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the job was ended on the way out
        sys.exit("bench_stacks: interrupted")
