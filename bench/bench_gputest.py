"""gpu-test and bench allreduce against the hand-written scripts they replace (gloo, CPU, this node).

    .venv/bin/python bench/bench_gputest.py [--repeat 3] [--cap 90] [--netns]

Rows (wall seconds, median of --repeat; commands that would wait for the default process-group
timeout are killed at --cap and shown as "> cap"):
- time to a verdict, 4 local ranks: `rankscope gpu-test --nproc 4` vs torchrun + bench/manual_gpu_test.py;
- a node that cannot connect (rank 1 of 2, nobody at MASTER_ADDR:MASTER_PORT): `gpu-test --timeout 5`
  vs the manual script, which inherits the default timeout (30 min for gloo);
- a wrong interface variable (GLOO_SOCKET_IFNAME=nosuch0, 2 ranks);
- with --netns alone (root; hold /tmp/rankscope-system.lock for it): two namespace nodes whose
  hostname resolves to loopback and no GLOO_SOCKET_IFNAME;
- busbw, 2 ranks: `rankscope bench allreduce --json` vs bench/manual_allreduce.py, same sizes.
Prints Markdown tables (paste into docs/benchmarks.md) and writes bench/out/gputest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankscope.demo.launch import kill_tree  # noqa: E402

PY = sys.executable
TORCHRUN = [PY, "-m", "torch.distributed.run"]
MANUAL = str(ROOT / "bench" / "manual_gpu_test.py")
SIZES = [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24]  # 1K..16M, factor 4


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.endswith("_SOCKET_IFNAME")}
    return {**base, "OMP_NUM_THREADS": "1", **extra}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def timed(argv: list[str], run_env: dict[str, str], cap: float) -> tuple[float, int | None, str]:
    began = time.perf_counter()
    process = subprocess.Popen(
        argv, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = process.communicate(timeout=cap)
    except subprocess.TimeoutExpired:
        kill_tree(process, grace=2.0)  # torchrun's workers live in their own sessions
        out, _ = process.communicate()
        return cap, None, out
    return time.perf_counter() - began, process.returncode, out


def row(name: str, argv: list[str], run_env: dict[str, str], cap: float, repeat: int) -> dict[str, object]:
    times, codes, last = [], [], ""
    for _ in range(repeat):
        seconds, code, last = timed(argv, run_env, cap)
        times.append(seconds)
        codes.append(code)
    median = statistics.median(times)
    capped = any(c is None for c in codes)
    shown = f"> {cap:g} (killed)" if capped else f"{median:.1f}"
    tail = " | ".join(line for line in last.strip().splitlines()[-2:])[:160]
    print(f"  {name}: {shown} s, exit {codes[-1]}", file=sys.stderr)
    return {
        "row": name,
        "seconds": round(median, 2),
        "all": [round(t, 2) for t in times],
        "exit": codes[-1],
        "capped": capped,
        "shown": shown,
        "tail": tail,
    }


def unreachable_env() -> dict[str, str]:
    # No LOCAL_WORLD_SIZE: with it, MASTER_ADDR on loopback in a multi-node run is caught before connecting
    return env(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="1", LOCAL_RANK="1", WORLD_SIZE="2"
    )


def netns_rows(cap: float, repeat: int) -> list[dict[str, object]]:
    from tests.support.netns import veth_pair_nodes

    rows = []
    for name, script in (
        (
            "netns, hostname on loopback, no GLOO_SOCKET_IFNAME: rankscope gpu-test --timeout 20",
            ["-m", "rankscope", "gpu-test", "--backend", "gloo", "--timeout", "20"],
        ),
        ("netns, hostname on loopback, no GLOO_SOCKET_IFNAME: manual script", [MANUAL]),
    ):
        times, capped = [], False
        for attempt in range(repeat):
            with veth_pair_nodes() as nodes:
                port = str(29600 + attempt)
                began = time.perf_counter()
                procs = [
                    subprocess.Popen(
                        nodes.argv(
                            i,
                            [
                                *TORCHRUN,
                                "--nnodes",
                                "2",
                                "--nproc-per-node",
                                "1",
                                "--node-rank",
                                str(i),
                                "--master-addr",
                                nodes.addresses[0],
                                "--master-port",
                                port,
                                *script,
                            ],
                        ),
                        env=env(),
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                    for i in range(2)
                ]
                for proc in procs:
                    try:
                        proc.wait(max(1.0, cap - (time.perf_counter() - began)))
                    except subprocess.TimeoutExpired:
                        capped = True
                        kill_tree(proc, grace=2.0)
                times.append(min(cap, time.perf_counter() - began))
        median = statistics.median(times)
        shown = f"> {cap:g} (killed)" if capped else f"{median:.1f}"
        print(f"  {name}: {shown} s", file=sys.stderr)
        rows.append({"row": name, "seconds": round(median, 2), "capped": capped, "shown": shown})
    return rows


def busbw_rows(repeat: int) -> list[dict[str, object]]:
    sizes = ",".join(map(str, SIZES))
    ours, manual = [], []
    for _ in range(repeat):
        out = subprocess.run(
            [
                PY,
                "-m",
                "rankscope",
                "bench",
                "allreduce",
                "--nproc",
                "2",
                "--min-bytes",
                "1K",
                "--max-bytes",
                "16M",
                "--factor",
                "4",
                "--warmup",
                "5",
                "--iters",
                "20",
                "--json",
            ],
            env=env(),
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        ).stdout
        ours.append({row["size"]: row["busbw"] for row in json.loads(out)["rows"]})
        out = subprocess.run(
            [
                *TORCHRUN,
                "--standalone",
                "--nproc-per-node",
                "2",
                str(ROOT / "bench" / "manual_allreduce.py"),
                sizes,
                "5",
                "20",
            ],
            env=env(),
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        ).stdout
        manual.append({int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()})
    return [
        {
            "size": size,
            "rankscope_busbw": round(statistics.median(o[size] for o in ours), 3),
            "manual_busbw": round(statistics.median(m[size] for m in manual), 3),
        }
        for size in SIZES
    ]


def local_rows(cap: float, repeat: int) -> list[dict[str, object]]:
    rankscope = [PY, "-m", "rankscope"]
    manual_2 = [*TORCHRUN, "--standalone", "--nproc-per-node", "2", MANUAL]
    cases = [
        ("verdict, 4 ranks: rankscope gpu-test --nproc 4", [*rankscope, "gpu-test", "--nproc", "4"], env()),
        ("verdict, 4 ranks: torchrun + manual script",
         [*TORCHRUN, "--standalone", "--nproc-per-node", "4", MANUAL], env()),
        ("unreachable master: rankscope gpu-test --timeout 5", [*rankscope, "gpu-test", "--timeout", "5"],
         unreachable_env()),
        ("unreachable master: manual script (default timeout)", [PY, MANUAL], unreachable_env()),
        ("GLOO_SOCKET_IFNAME=nosuch0: rankscope gpu-test --nproc 2", [*rankscope, "gpu-test", "--nproc", "2"],
         env(GLOO_SOCKET_IFNAME="nosuch0")),
        ("GLOO_SOCKET_IFNAME=nosuch0: torchrun + manual script", manual_2, env(GLOO_SOCKET_IFNAME="nosuch0")),
    ]  # fmt: skip
    return [row(name, argv, run_env, cap, repeat) for name, argv, run_env in cases]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cap", type=float, default=90.0)
    parser.add_argument(
        "--netns", action="store_true", help="only the two-namespace rows (root; hold the lock)"
    )
    parser.add_argument("--busbw-only", action="store_true", help="only the bandwidth table")
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    bandwidth: list[dict[str, object]] = []
    if args.netns:
        rows = netns_rows(args.cap, args.repeat)
    else:
        rows = [] if args.busbw_only else local_rows(args.cap, args.repeat)
        bandwidth = busbw_rows(args.repeat)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"\n| case | wall s (median of {args.repeat}) | exit |\n|---|---:|---:|")
    for r in rows:
        print(f"| {r['row']} | {r['shown']} | {r.get('exit', '')} |")
    if bandwidth:
        print("\n| payload | busbw rankscope (GB/s) | busbw plain loop (GB/s) |\n|---:|---:|---:|")
        for b in bandwidth:
            print(f"| {b['size']} | {b['rankscope_busbw']} | {b['manual_busbw']} |")
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    name = "gputest_netns.json" if args.netns else "gputest_busbw.json" if args.busbw_only else "gputest.json"
    (out / name).write_text(json.dumps({"rows": rows, "busbw": bandwidth}, indent=2))


if __name__ == "__main__":
    main()
