"""Multi-node stacks: 32 simulated nodes over ssh on loopback, rankscope vs the manual pdsh + py-spy line.

Every "node" is a host alias of one private sshd on 127.0.0.1 (tests/support/sshd.py) with
its own small hung job (bench/fake_job.py: a launcher and 2 workers, 64 ranks in all). A
stand-in remote rankscope picks the node's job by the RANKSCOPE_NODE variable each alias
sends. A black-holed node (iptables DROP on its port) measures what a dead node costs.
All of it runs inside a private network namespace, so the DROP rule touches nothing else.

    sudo .venv/bin/python bench/bench_multinode.py [--nodes 32] [--repeat 3] [--deadline 3] [--root-rc]
        [--engines] [--baseline-src DIR] [--no-black-hole]

--engines adds the fan-out rows again with ClusterShell's Task as the engine (bench/task_engine.py);
--baseline-src DIR adds them with the rankscope sources in DIR (e.g. an older checkout's src/), run
in the same set-up, for a before/after comparison in one run.

A node's login shell reads a plain ~/.bashrc (Debian's /etc/skel one, which returns at once for
non-interactive shells): the sessions get a scratch HOME through sshd's SetEnv. With --root-rc
they read this machine's /root/.bashrc instead, which runs `pyenv init` on every ssh command
(about 80 ms of CPU per login, paid by rankscope and the manual line alike).

Each row gets a warm-up run ("first run s"), then the rows are run round after round, --repeat
times. Prints a Markdown table (paste into docs/benchmarks.md) and writes bench/out/multinode.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
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


def measure_rows(rows: list[tuple[str, list[str], dict[str, str]]], repeat: int) -> list[dict[str, object]]:
    """A warm-up run of every row, then ``repeat`` rounds over all rows (interleaved: a slow
    minute on a shared machine falls on every row alike, not on the rows that happened to run then)."""
    firsts = [timed(argv, env)[0] for _, argv, env in rows]  # page cache, sshd's first fork, ssh masters
    times: list[list[float]] = [[] for _ in rows]
    last: list[subprocess.CompletedProcess[str]] = []
    for _ in range(repeat):
        last = []
        for index, (_, argv, env) in enumerate(rows):
            seconds, proc = timed(argv, env)
            times[index].append(seconds)
            last.append(proc)
    return [
        {
            "name": name,
            "first_s": round(first, 2),
            "median_s": round(statistics.median(row_times), 2),
            "min_s": round(min(row_times), 2),
            "max_s": round(max(row_times), 2),
            "returncode": proc.returncode,
            "stdout_bytes": len(proc.stdout),
            "stdout_lines": len(proc.stdout.splitlines()),
            "stdout": proc.stdout,
            "stderr_tail": proc.stderr[-500:],
        }
        for (name, _, _), first, row_times, proc in zip(rows, firsts, times, last)
    ]


def sequential_cost(argv_for_node: list[list[str]], env: dict[str, str]) -> dict[str, float]:
    """Run the per-node work one node after the other, without ssh: wall and CPU seconds in all."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    for argv in argv_for_node:
        subprocess.run(argv, capture_output=True, env=env, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(time.perf_counter() - began, 2), "cpu_s": round(cpu, 2)}


def inner(args: argparse.Namespace) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="rankscope-bench-"))
    nodes = [f"node{i:02d}" for i in range(1, args.nodes + 1)]
    nodeset = f"node[01-{args.nodes:02d}]"
    culprit = 5
    jobs: list[subprocess.Popen[bytes]] = []
    sshd = None
    try:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        extra = []
        if not args.root_rc:
            home = scratch / "home"
            home.mkdir()
            shutil.copy("/etc/skel/.bashrc", home / ".bashrc")
            extra.append(f"SetEnv HOME={home}")
        sshd = start_sshd(scratch / "sshd", nodes, extra=extra)
        hole = free_port()
        subprocess.run(
            ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", str(hole), "-j", "DROP"], check=True
        )
        add_alias(sshd, "blackhole", Port=str(hole))
        pid_dir = scratch / "jobs"
        pid_dir.mkdir()
        for index, node in enumerate(nodes):
            argv = [sys.executable, str(FAKE_JOB), "--node-rank", str(index), "--nproc", "2"]
            argv += ["--nnodes", str(len(nodes)), "--culprit", str(culprit)]
            job = subprocess.Popen(argv, start_new_session=True)
            jobs.append(job)
            (pid_dir / f"{node}.pid").write_text(str(job.pid))
        deadline = time.monotonic() + 60

        def workers() -> int:
            pgrep = [
                subprocess.run(["pgrep", "-P", str(j.pid)], capture_output=True, text=True) for j in jobs
            ]
            return sum(len(p.stdout.split()) for p in pgrep)

        while workers() < 2 * len(nodes):
            if time.monotonic() > deadline:
                raise TimeoutError("fake jobs did not start")
            time.sleep(0.2)
        time.sleep(1.0)
        dispatch = scratch / "rankscope-on-node"
        dispatch.write_text(
            "#!/bin/sh\n"
            f'launcher="$(cat {pid_dir}/"$RANKSCOPE_NODE".pid)"\n'
            f'exec {RANKSCOPE} "$@" $(pgrep -P "$launcher" | sed "s/^/--pid /")\n'
        )
        dispatch.chmod(0o755)
        env = dict(os.environ, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS_APPEND=f"-F {sshd.ssh_config}")
        setup = f"export PATH={VENV_BIN}:$PATH"
        common = ["--ssh-config", str(sshd.ssh_config), "--remote-rankscope", str(dispatch), "--fanout", "32"]
        manual_line = (
            f"{setup}; pgrep -P $(cat {pid_dir}/$RANKSCOPE_NODE.pid) | xargs -I {{}} py-spy dump --pid {{}}"
        )
        stacks = [str(RANKSCOPE), "stacks", "--hosts", nodeset, *common]
        pdsh = ["pdsh", "-R", "ssh", "-f", "32"]
        hole_flags = ["--node-timeout", f"{args.deadline:g}"]
        pdsh_hole = ["-t", f"{args.deadline:g}", "-u", f"{args.deadline:g}"]
        exec_date = [
            str(RANKSCOPE),
            "exec",
            "--hosts",
            nodeset,
            "--via",
            "ssh",
            "--ssh-config",
            str(sshd.ssh_config),
        ]
        # %n: one master per alias (all aliases share host and port here, %C would share one master).
        # 600 s: the masters outlive a whole round over all rows.
        control = ["ControlMaster=auto", f"ControlPath={scratch}/cm-%n", "ControlPersist=600"]
        plan = [
            ("rankscope stacks --via ssh", [*stacks, "--via", "ssh"]),
            ("rankscope stacks --via pdsh", [*stacks, "--via", "pdsh"]),
            (
                "rankscope stacks --via ssh, connections kept (ControlPersist)",
                [*stacks, "--via", "ssh", *(f"--ssh-option={o}" for o in control)],
            ),
            ("manual pdsh + py-spy", [*pdsh, "-w", nodeset, manual_line]),
            ("rankscope exec -- date", [*exec_date, "--", "date +%Y"]),
            ("manual pdsh date", [*pdsh, "-w", nodeset, "date +%Y"]),
            (
                f"rankscope stacks --via ssh, + black hole, --node-timeout {args.deadline:g}",
                [*stacks, "--via", "ssh", *hole_flags, "--hosts", f"{nodeset},blackhole"],
            ),
            (
                f"manual pdsh + py-spy, + black hole (pdsh -t/-u {args.deadline:g})",
                [*pdsh, *pdsh_hole, "-w", f"{nodeset},blackhole", manual_line],
            ),
        ]
        if args.no_black_hole:
            plan = [(name, argv) for name, argv in plan if "black hole" not in name]
        # The same fan-out rows through another engine: ClusterShell's Task, or older sources.
        engines: list[tuple[str, list[str], dict[str, str]]] = [("", [str(RANKSCOPE)], env)]
        if args.engines:
            task = [sys.executable, str(ROOT / "bench" / "task_engine.py")]
            engines.append((" [ClusterShell Task]", task, env))
        if args.baseline_src:
            old = dict(env, PYTHONPATH=str(Path(args.baseline_src).resolve()))
            engines.append((" [before]", [str(RANKSCOPE)], old))
        rows = [(name, argv, env) for name, argv in plan]
        for number, (label, prefix, engine_env) in enumerate(engines[1:], start=1):
            for name, argv in plan:
                if name.startswith("rankscope"):
                    # Own ssh masters per engine: a row must pay for its first connections itself.
                    argv = [str(a).replace(f"{scratch}/cm-", f"{scratch}/cm{number}-") for a in argv]
                    rows.append((name + label, [*prefix, *argv[1:]], engine_env))
        runs = measure_rows(rows, args.repeat)
        # Where the time goes: the per-node work alone, node after node, no ssh.
        # What the head runs on each node (StacksOptions.to_argv: its raw answer); a version before the
        # raw answer (--baseline-src) gets the command line it knew.
        remote_cmd = [str(dispatch), "stacks", "--local", "--json", "--node-answer", "--deadline", "23"]
        before_cmd = [word for word in remote_cmd if word != "--node-answer"]
        manual_cmd = ["sh", "-c", manual_line]
        node_env = dict(env, RANKSCOPE_NODE="node01")
        before_env = (
            dict(node_env, PYTHONPATH=str(Path(args.baseline_src).resolve())) if args.baseline_src else {}
        )
        imports = (
            "import re, rankscope.cli.stacks_request, rankscope.cli.stacks_node"  # re: the console script's
        )
        costs = {
            "remote rankscope stacks --local --json --node-answer": sequential_cost(
                [remote_cmd] * len(nodes), node_env
            ),
            # The same node answering with its whole document (what --native or live recorders get).
            "remote rankscope stacks --local --json (whole document)": sequential_cost(
                [before_cmd] * len(nodes), node_env
            ),
            **(
                {
                    "remote rankscope stacks --local --json [before]": sequential_cost(
                        [before_cmd] * len(nodes), before_env
                    )
                }
                if before_env
                else {}
            ),
            # Where a node's time goes: the same command without the live flight recorders' pass, the
            # interpreter alone, rankscope's imports alone, the guardian's bare interpreter (rankscope.lifetime).
            "remote rankscope stacks --local --json --node-answer --no-fr": sequential_cost(
                [[*remote_cmd, "--no-fr"]] * len(nodes), node_env
            ),
            "python -c pass": sequential_cost([[sys.executable, "-c", "pass"]] * len(nodes), node_env),
            "python -I -S -c pass (the guardian's interpreter)": sequential_cost(
                [[sys.executable, "-I", "-S", "-c", "pass"]] * len(nodes), node_env
            ),
            "python -c 'import (the node's modules)'": sequential_cost(
                [[sys.executable, "-c", imports]] * len(nodes), node_env
            ),
            "manual pgrep, xargs py-spy dump": sequential_cost([manual_cmd] * len(nodes), node_env),
            "ssh NODE true (client side)": sequential_cost(
                [["ssh", "-F", str(sshd.ssh_config), node, "true"] for node in nodes], env
            ),
        }
        first = runs[0]
        assert first["returncode"] == 0, first
        assert f"{2 * len(nodes)} of {2 * len(nodes)} processes dumped" in str(first["stdout"]), first[
            "stdout"
        ]
        hole_run = next(
            (r for r in runs if "black hole" in str(r["name"]) and str(r["name"]).startswith("rankscope")),
            None,
        )
        if hole_run is not None and "blackhole [unreachable]" not in str(hole_run["stdout"]):
            print(
                "WARNING: black-hole run did not list the black hole as unreachable:\n"
                + str(hole_run["stdout"])
            )
        out = ROOT / "bench" / "out"
        out.mkdir(parents=True, exist_ok=True)
        (out / "multinode.json").write_text(
            json.dumps(
                {
                    "nodes": len(nodes),
                    "ranks": 2 * len(nodes),
                    "root_rc": args.root_rc,
                    "runs": runs,
                    "sequential": costs,
                },
                indent=2,
            )
        )
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"\n{len(nodes)} nodes x 2 ranks, {os.cpu_count()} CPUs, median of {args.repeat}, "
            f"login rc: {'/root/.bashrc' if args.root_rc else '/etc/skel/.bashrc'}, load average {load}\n"
        )
        print("| what | median s | min-max s | first run s | exit | output lines |")
        print("|---|---:|---:|---:|---:|---:|")
        for run in runs:
            spread = f"{run['min_s']}-{run['max_s']}"
            print(
                f"| {run['name']} | {run['median_s']} | {spread} | {run['first_s']} | {run['returncode']} "
                f"| {run['stdout_lines']} |"
            )
        print(f"\nper-node work for all {len(nodes)} nodes, one after the other (no fan-out):\n")
        print("| what | wall s | CPU s (this side's children) |")
        print("|---|---:|---:|")
        for name, cost in costs.items():
            print(f"| {name} | {cost['wall_s']} | {cost['cpu_s']} |")
        if hole_run is not None:
            overhead = float(hole_run["median_s"]) - float(first["median_s"])  # type: ignore[arg-type]
            print(f"\nblack-holed node adds {overhead:.2f}s (deadline {args.deadline:g}s)")
        print("\nrankscope --via ssh report head:\n" + "\n".join(str(first["stdout"]).splitlines()[:25]))
        return 0
    finally:
        for job in jobs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, 9)
        for master in scratch.glob("cm*-*"):  # the kept ssh connections end with the benchmark
            subprocess.run(["ssh", "-o", f"ControlPath={master}", "-O", "exit", "x"], capture_output=True)
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
    parser.add_argument("--root-rc", action="store_true", help="nodes read /root/.bashrc at login")
    parser.add_argument("--engines", action="store_true", help="also run the rows on ClusterShell's Task")
    parser.add_argument("--baseline-src", metavar="DIR", help="also run the rows with the rankscope in DIR")
    parser.add_argument("--no-black-hole", action="store_true", help="leave out the two black-hole rows")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        return inner(args)
    namespace = f"rsbench{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        argv = [sys.executable, __file__, "--inner", "--nodes", str(args.nodes), "--repeat", str(args.repeat),
                "--deadline", str(args.deadline), *(["--root-rc"] if args.root_rc else []),
                *(["--engines"] if args.engines else []),
                *(["--no-black-hole"] if args.no_black_hole else []),
                *(["--baseline-src", args.baseline_src] if args.baseline_src else [])]  # fmt: skip
        return subprocess.run(["ip", "netns", "exec", namespace, *argv]).returncode
    finally:
        subprocess.run(["ip", "netns", "del", namespace])


if __name__ == "__main__":
    sys.exit(main())
