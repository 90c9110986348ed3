"""Multi-node stacks: 32 simulated nodes over ssh on loopback, rankscope vs the manual pdsh + py-spy line.

Every "node" is a host alias of one private sshd on 127.0.0.1 (tests/support/sshd.py) with
its own small hung job (bench/fake_job.py: a launcher and 2 workers, 64 ranks in all). A
stand-in remote rankscope picks the node's job by the RANKSCOPE_NODE variable each alias
sends. A black-holed node (iptables DROP on its port) measures what a dead node costs.
All of it runs inside a private network namespace, so the DROP rule touches nothing else.

    sudo .venv/bin/python bench/bench_multinode.py [--nodes 32] [--repeat 3] [--deadline 3]

Prints a Markdown table (paste into docs/benchmarks.md) and writes bench/out/multinode.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.sshd import add_alias, free_port, start_sshd  # noqa: E402

VENV_BIN = Path(sys.executable).parent
RANKSCOPE = VENV_BIN / "rankscope"
FAKE_JOB = ROOT / "bench" / "fake_job.py"


def timed(
    argv: list[str], env: dict[str, str], timeout: float = 300
) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    return time.perf_counter() - began, proc


def measure(name: str, argv: list[str], env: dict[str, str], repeat: int) -> dict[str, object]:
    times, last = [], None
    for _ in range(repeat):
        seconds, last = timed(argv, env)
        times.append(seconds)
    assert last is not None
    return {
        "name": name,
        "median_s": round(statistics.median(times), 2),
        "min_s": round(min(times), 2),
        "max_s": round(max(times), 2),
        "returncode": last.returncode,
        "stdout_bytes": len(last.stdout),
        "stdout_lines": len(last.stdout.splitlines()),
        "stdout": last.stdout,
        "stderr_tail": last.stderr[-500:],
    }


def inner(args: argparse.Namespace) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="rankscope-bench-"))
    nodes = [f"node{i:02d}" for i in range(1, args.nodes + 1)]
    nodeset = f"node[01-{args.nodes:02d}]"
    culprit = 5
    jobs: list[subprocess.Popen[bytes]] = []
    sshd = None
    try:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        sshd = start_sshd(scratch / "sshd", nodes)
        hole = free_port()
        subprocess.run(
            ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", str(hole), "-j", "DROP"], check=True
        )
        add_alias(sshd, "blackhole", Port=str(hole))
        pid_dir = scratch / "jobs"
        pid_dir.mkdir()
        for index, node in enumerate(nodes):
            job = subprocess.Popen(
                [sys.executable, str(FAKE_JOB), "--node-rank", str(index), "--nproc", "2", "--nnodes", str(len(nodes)),
                 "--culprit", str(culprit)],
                start_new_session=True,
            )  # fmt: skip
            jobs.append(job)
            (pid_dir / f"{node}.pid").write_text(str(job.pid))
        deadline = time.monotonic() + 60
        while sum(len(subprocess.run(["pgrep", "-P", str(j.pid)], capture_output=True, text=True).stdout.split())
                  for j in jobs) < 2 * len(nodes):  # fmt: skip
            if time.monotonic() > deadline:
                raise TimeoutError("fake jobs did not start")
            time.sleep(0.2)
        time.sleep(1.0)
        dispatch = scratch / "rankscope-on-node"
        dispatch.write_text(
            "#!/bin/sh\n"
            f'exec {RANKSCOPE} "$@" $(pgrep -P "$(cat {pid_dir}/"$RANKSCOPE_NODE".pid)" | sed "s/^/--pid /")\n'
        )
        dispatch.chmod(0o755)
        env = dict(os.environ, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS_APPEND=f"-F {sshd.ssh_config}")
        setup = f"export PATH={VENV_BIN}:$PATH"
        common = ["--ssh-config", str(sshd.ssh_config), "--remote-rankscope", str(dispatch), "--fanout", "32"]
        manual_line = (
            f"{setup}; pgrep -P $(cat {pid_dir}/$RANKSCOPE_NODE.pid) | xargs -I {{}} py-spy dump --pid {{}}"
        )
        runs = [
            measure("rankscope stacks --via ssh", [str(RANKSCOPE), "stacks", "--hosts", nodeset, "--via", "ssh", *common], env, args.repeat),
            measure("rankscope stacks --via pdsh", [str(RANKSCOPE), "stacks", "--hosts", nodeset, "--via", "pdsh", *common], env, args.repeat),
            measure("manual pdsh + py-spy", ["pdsh", "-R", "ssh", "-f", "32", "-w", nodeset, manual_line], env, args.repeat),
            measure("rankscope exec -- date", [str(RANKSCOPE), "exec", "--hosts", nodeset, "--via", "ssh", "--ssh-config", str(sshd.ssh_config), "--", "date +%Y"], env, args.repeat),
            measure("manual pdsh date", ["pdsh", "-R", "ssh", "-f", "32", "-w", nodeset, "date +%Y"], env, args.repeat),
            measure(
                f"rankscope stacks --via ssh, + black hole, --node-timeout {args.deadline:g}",
                [str(RANKSCOPE), "stacks", "--hosts", f"{nodeset},blackhole", "--via", "ssh", "--node-timeout", f"{args.deadline:g}", *common],
                env, args.repeat,
            ),
            measure(
                "manual pdsh + py-spy, + black hole (pdsh -t 10 -u 10)",
                ["pdsh", "-R", "ssh", "-f", "32", "-t", "10", "-u", "10", "-w", f"{nodeset},blackhole", manual_line], env, args.repeat,
            ),
        ]  # fmt: skip
        first = runs[0]
        assert first["returncode"] == 0, first
        assert f"{2 * len(nodes)} of {2 * len(nodes)} processes dumped" in str(first["stdout"]), first[
            "stdout"
        ]
        hole_run = runs[5]
        if "blackhole [unreachable]" not in str(hole_run["stdout"]):
            print(
                "WARNING: black-hole run did not list the black hole as unreachable:\n"
                + str(hole_run["stdout"])
            )
        out = ROOT / "bench" / "out"
        out.mkdir(parents=True, exist_ok=True)
        (out / "multinode.json").write_text(
            json.dumps({"nodes": len(nodes), "ranks": 2 * len(nodes), "runs": runs}, indent=2)
        )
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"\n{len(nodes)} nodes x 2 ranks, {os.cpu_count()} CPUs, median of {args.repeat}, load average {load}\n"
        )
        print("| what | median s | min-max s | exit | output lines |")
        print("|---|---:|---:|---:|---:|")
        for run in runs:
            print(
                f"| {run['name']} | {run['median_s']} | {run['min_s']}-{run['max_s']} | {run['returncode']} | {run['stdout_lines']} |"
            )
        overhead = float(hole_run["median_s"]) - float(first["median_s"])  # type: ignore[arg-type]
        print(f"\nblack-holed node adds {overhead:.2f}s (deadline {args.deadline:g}s)")
        print("\nrankscope --via ssh report head:\n" + "\n".join(str(first["stdout"]).splitlines()[:25]))
        return 0
    finally:
        for job in jobs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, 9)
        if sshd is not None:
            sshd.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=10.0, help="--node-timeout for the black-hole run")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        return inner(args)
    namespace = f"rsbench{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        argv = [sys.executable, __file__, "--inner", "--nodes", str(args.nodes), "--repeat", str(args.repeat),
                "--deadline", str(args.deadline)]  # fmt: skip
        return subprocess.run(["ip", "netns", "exec", namespace, *argv]).returncode
    finally:
        subprocess.run(["ip", "netns", "del", namespace])


if __name__ == "__main__":
    sys.exit(main())
