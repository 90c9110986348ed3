"""`rankscope trace` against the untraced program, a no-op hook, the standard `trace` module and viztracer.

    python bench/bench_trace.py [--python PY ...] [--repeat 3] [--fib 23] [--steps 200]

Workloads (each in a fresh interpreter per mode):
- fib: recursive fib(--fib), pure-Python calls (the worst case for a call tracer);
- mlp: a small torch CPU MLP, --steps training steps after 20 warm-up steps (skipped where torch
  does not import).

Modes:
- untraced;
- floor: a no-op hook of the cheapest kind, ``sys.settrace`` on Python < 3.12 (a global function
  returning None: call events only), ``sys.monitoring`` PY_START on >= 3.12;
- rankscope calls: ``rankscope.trace.start()`` ring mode, call/return of the user's code, with the
  C extension where it is built for that Python (``src/rankscope/trace/_ctrace*.so``);
- rankscope pure: the same with ``RANKSCOPE_TRACE_PURE=1`` (the pure-Python hooks);
- rankscope sample: ``start(calls=False, sample_ms=10)``, a thread writing every thread's stack;
- rankscope full: calls, ``full=True`` (every event kept; its file size for one run of the workload);
- stdlib trace: ``trace.Trace(ignoredirs=[sys.prefix, sys.exec_prefix], trace=1, count=1,
  timing=True)`` with its output to a file, as the guide configures it (the file size is reported);
- viztracer: ``VizTracer()`` around the workload, where it imports (its buffer is not saved);
- ab-calls / ab-sample: untraced and traced runs alternated in one process (``start``/``stop``
  around each traced run), compared to that process's own untraced runs: both see the same
  machine noise, so small ratios (the 1.05x and 1.1x targets) can be told on a busy machine.

The time is the workload's own, measured inside the child, minimum of --repeat runs
(1 run for the stdlib module); every mode runs --rounds times,
interleaved with the others, and the minimum is kept (a shared machine's noise only adds time). Ratios are to the untraced time of the same Python.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time
mode, workload, repeat, fib_n, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

if workload == "mlp":
    import torch
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    def work():
        for _ in range(steps):
            step()

    for _ in range(20):
        step()
else:
    def work():
        fib(fib_n)

def timed():
    t = time.perf_counter()
    work()
    return time.perf_counter() - t

size = 0
if mode == "untraced":
    best = min(timed() for _ in range(repeat))
elif mode == "floor":
    if sys.version_info >= (3, 12):
        mon = sys.monitoring
        mon.use_tool_id(mon.PROFILER_ID, "floor")
        mon.register_callback(mon.PROFILER_ID, mon.events.PY_START, lambda code, offset: None)
        mon.set_events(mon.PROFILER_ID, mon.events.PY_START)
    else:
        sys.settrace(lambda frame, event, arg: None)
    best = min(timed() for _ in range(repeat))
    sys.settrace(None)
elif mode.startswith("ab-"):  # untraced and traced runs alternated in one process: the same noise for both
    import rankscope.trace as rt
    traced, plain = [], []
    for _ in range(repeat):
        plain.append(timed())
        if mode == "ab-sample":
            rt.start(out=out, calls=False, sample_ms=10)
        else:
            rt.start(out=out)
        traced.append(timed())
        rt.stop()
    best, base = min(traced), min(plain)
    print(json.dumps({"seconds": best, "bytes": 0, "base": base}))
    sys.exit(0)
elif mode.startswith("rankscope"):
    import rankscope.trace as rt
    kind = mode.split("-", 1)[1]
    if kind == "sample":
        rt.start(out=out, calls=False, sample_ms=10)
    else:
        rt.start(out=out, full=(kind == "full"))
    best = min(timed() for _ in range(repeat))
    path = rt.active_path()
    rt.stop()
    size = os.path.getsize(path)
    if kind == "full":  # bytes of one run of the workload, as the stdlib module's single run
        fixed = 4096 + (1 << 20)
        size = fixed + (size - fixed) // repeat
elif mode == "stdlib":
    import trace
    tracer = trace.Trace(ignoredirs=[sys.prefix, sys.exec_prefix], trace=1, count=1, timing=True)
    path = os.path.join(out, "stdlib-trace.txt")
    saved = sys.stdout
    sys.stdout = open(path, "w")
    try:
        t = time.perf_counter()
        tracer.runfunc(work)
        best = time.perf_counter() - t
    finally:
        sys.stdout.close()
        sys.stdout = saved
    size = os.path.getsize(path)
elif mode == "viztracer":
    from viztracer import VizTracer
    times = []
    for _ in range(repeat):
        tracer = VizTracer(verbose=0, max_stack_depth=-1)
        tracer.start()
        times.append(timed())
        tracer.stop()
        tracer.clear()
    best = min(times)
print(json.dumps({"seconds": best, "bytes": size}))
"""

MODES = (
    "untraced",
    "floor",
    "rankscope-calls",
    "rankscope-pure",
    "rankscope-sample",
    "rankscope-full",
    "stdlib",
    "viztracer",
    "ab-calls",
    "ab-sample",
)

ALTERNATE = r"""
import json, os, sys, time
workload, rounds, fib_n, steps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

if workload == "mlp":
    import torch
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    def work():
        for _ in range(steps):
            step()

    for _ in range(20):
        step()
else:
    def work():
        fib(fib_n)

def timed():
    t = time.perf_counter()
    work()
    return time.perf_counter() - t

def floor_on():
    if sys.version_info >= (3, 12):
        mon = sys.monitoring
        mon.use_tool_id(mon.PROFILER_ID, "floor")
        mon.register_callback(mon.PROFILER_ID, mon.events.PY_START, lambda code, offset: None)
        mon.set_events(mon.PROFILER_ID, mon.events.PY_START)
    else:
        sys.settrace(lambda frame, event, arg: None)

def floor_off():
    if sys.version_info >= (3, 12):
        mon = sys.monitoring
        mon.set_events(mon.PROFILER_ID, 0)
        mon.free_tool_id(mon.PROFILER_ID)
    else:
        sys.settrace(None)

import rankscope.trace as rt
from rankscope.trace import tracer
times = {"untraced": [], "floor": [], "rankscope calls (C)": [], "rankscope calls (pure Python)": [], "rankscope sample 10 ms": []}
for _ in range(rounds):
    times["untraced"].append(timed())
    floor_on()
    times["floor"].append(timed())
    floor_off()
    for name, env, options in (
        ("rankscope calls (C)", "0", {}),
        ("rankscope calls (pure Python)", "1", {}),
        ("rankscope sample 10 ms", "0", {"calls": False, "sample_ms": 10}),
    ):
        os.environ["RANKSCOPE_TRACE_PURE"] = env
        path = rt.start(out=out, **options)
        time.sleep(0.02)  # the steady state: the sampler thread started and waiting
        times[name].append(timed())
        rt.stop()
        os.unlink(path)
print(json.dumps({k: min(v) for k, v in times.items()}))
"""


def alternate(python: str, workload: str, args: argparse.Namespace) -> None:
    """Untraced, floor and the rankscope modes alternated in one process: small ratios are comparable."""
    with tempfile.TemporaryDirectory() as out:
        script = Path(out) / "workload.py"
        script.write_text(ALTERNATE)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        argv = [python, str(script), workload, str(args.rounds * 5), str(args.fib), str(args.steps), out]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
        if proc.returncode != 0:
            print(f"  alternate {workload}: failed: {proc.stderr.strip()[-300:]}", file=sys.stderr)
            return
        times = json.loads(proc.stdout.strip().splitlines()[-1])
        version = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        base, floor = times["untraced"], times["floor"]
        for name, seconds in times.items():
            to_floor = f"{seconds / floor:.2f}" if name != "untraced" else "-"
            print(
                f"| {version} | {workload} | {name} | {seconds:.4f} | {seconds / base:.2f} | {to_floor} |",
                flush=True,
            )


def run_child(python: str, mode: str, workload: str, args: argparse.Namespace) -> dict | None:
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        env.pop("RANKSCOPE_TRACE_PURE", None)
        if mode == "rankscope-pure":  # the pure-Python hooks, without the C extension
            env["RANKSCOPE_TRACE_PURE"] = "1"
        repeat = 1 if mode == "stdlib" else args.repeat
        script = Path(out) / "workload.py"  # a real file: the user's own code, which every tracer traces
        script.write_text(CHILD)
        argv = [python, str(script), mode, workload, str(repeat), str(args.fib), str(args.steps), out]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            print(f"  {mode}/{workload}: skipped ({last})", file=sys.stderr)
            return None
        result: dict = json.loads(proc.stdout.strip().splitlines()[-1])
        return result


def has_module(python: str, name: str) -> bool:
    return subprocess.run([python, "-c", f"import {name}"], capture_output=True).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--python", action="append", help="interpreters to measure (default: this one)")
    parser.add_argument(
        "--repeat", type=int, default=5, help="runs of the workload in each child (minimum kept)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="children per mode, interleaved (minimum kept)")
    parser.add_argument("--fib", type=int, default=23)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--workload", action="append", choices=("fib", "mlp"))
    parser.add_argument("--mode", action="append", choices=MODES)
    parser.add_argument(
        "--alternate",
        action="store_true",
        help="one process per workload alternating untraced, floor, C, pure and sample runs (--rounds x 5)",
    )
    args = parser.parse_args()
    pythons = args.python or [sys.executable]
    workloads = args.workload or ["fib", "mlp"]
    modes = args.mode or list(MODES)
    if args.alternate:
        print("| python | workload | mode | seconds | x untraced | x floor |")
        print("|---|---|---|---:|---:|---:|")
        for python in pythons:
            for workload in workloads:
                if workload != "mlp" or has_module(python, "torch"):
                    alternate(python, workload, args)
        return
    if "untraced" not in modes:
        modes.insert(0, "untraced")
    print("| python | workload | mode | seconds | x untraced | x floor | file bytes |")
    print("|---|---|---|---:|---:|---:|---:|")
    for python in pythons:
        version = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        for workload in workloads:
            if workload == "mlp" and not has_module(python, "torch"):
                print(f"  {version}: no torch, mlp skipped", file=sys.stderr)
                continue
            best: dict[str, dict] = {}
            for round_no in range(args.rounds):  # modes interleaved, the minimum over rounds kept
                for mode in modes:
                    if mode == "viztracer" and not has_module(python, "viztracer"):
                        continue
                    if mode == "stdlib" and round_no:
                        continue  # one run: it is 100x slower and its ratio does not need precision
                    result = run_child(python, mode, workload, args)
                    if result is not None and (mode not in best or result["seconds"] < best[mode]["seconds"]):
                        best[mode] = result
            base = best.get("untraced", {}).get("seconds")
            floor = best.get("floor", {}).get("seconds")
            for mode in modes:
                if mode not in best:
                    continue
                seconds = best[mode]["seconds"]
                own_base = best[mode].get("base") or base  # ab- modes: their own untraced runs
                ratio = f"{seconds / own_base:.2f}" if own_base else "-"
                to_floor = f"{seconds / floor:.2f}" if floor and mode != "untraced" else "-"
                size = f"{best[mode]['bytes']:,}" if best[mode]["bytes"] else ""
                print(
                    f"| {version} | {workload} | {mode} | {seconds:.4f} | {ratio} | {to_floor} | {size} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
