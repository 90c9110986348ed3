"""One bad node and one bad link among N nodes: `rankscope net check` against the serial `nc -z` loop.

N "nodes" in network namespaces (tests/support/netfabric.py: each with its own network stack and
sshd, reached through a router namespace). Two faults are planted on the checked ports:

- a bad node: its firewall drops the ports (nothing reaches it; probes get no answer);
- a bad link: two nodes drop each other's packets on the ports (that pair cannot talk, both ways;
  every other link of both nodes is fine).

rankscope: one `net check --hosts n[1-N] --via ssh --window W --json` from the router namespace;
its time is until the command ends with its verdict, and the verdict must name exactly the bad
node and the two directions of the bad link (nothing else).

Manual: what users do, one node after the other: a listener (`nc -lk`) on every node, then for
each node `ssh NODE 'for peer in ...; do nc -z -w T peer PORT && echo ok || echo FAIL; done'`;
the bad node and link are read from the collected lines once the loop is over.

    sudo flock /tmp/rankscope-system.lock .venv/bin/python bench/bench_scale.py [--nodes 32 64 128]
        [--window 5] [--timeout 2] [--manual-max 64] [--light-ssh] [--node-timeout 240]
    sudo flock /tmp/rankscope-system.lock .venv/bin/python bench/bench_scale.py --gpu-test 4
    sudo flock /tmp/rankscope-system.lock .venv/bin/python bench/bench_scale.py --isolate 4

`--gpu-test K` instead runs a gloo `gpu-test` job with one rank per namespace node (the `SLURM_*`
variables srun gives its tasks), once with the last node's link down and once with n2 and the last
node dropping each other's packets, and prints rank 0's summary (bench/out/scale-gputest.json).
`--isolate K` runs `gpu-test --isolate --devices 0,1` on one node, then on K nodes at once through
`rankscope exec`, with slot 1 broken on n2 by the test hook (bench/out/scale-isolate.json).

Every namespace, sshd and process made here is removed in a `finally`, also on Ctrl-C or SIGTERM.
Prints a Markdown table (docs/benchmarks.md) and writes bench/out/scale.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.netfabric import Fabric, build_fabric  # noqa: E402

from bench.bench_net import ensure_nc  # noqa: E402

RANKSCOPE = str(Path(sys.executable).with_name("rankscope"))
CHECK_PORT = 7200  # rankscope's own listeners
MANUAL_PORT = 7201  # the manual loop's `nc -lk` listeners
LIGHT_KEX = "curve25519-sha256"


def faulty(count: int) -> tuple[str, tuple[str, str]]:
    """The bad node and the bad link among n1..nCOUNT (the link avoids the bad node)."""
    bad = f"n{max(3, count * 2 // 3)}"
    return bad, ("n2", f"n{count}")


def plant(fabric: Fabric, bad: str, link: tuple[str, str]) -> None:
    ports = f"{CHECK_PORT}:{MANUAL_PORT}"
    fabric.drop(bad, ports)
    fabric.drop(link[0], ports, source=link[1])
    fabric.drop(link[1], ports, source=link[0])


def expected_problems(bad: str, link: tuple[str, str]) -> list[str]:
    one, other = link
    return [f"no node reaches {bad}:{CHECK_PORT} (filtered)", f"{one} -> {other}:{CHECK_PORT} filtered",
            f"{other} -> {one}:{CHECK_PORT} filtered"]  # fmt: skip


def light_ssh(fabric: Fabric) -> None:
    """Cheaper logins for both sides (one classic key exchange): every node's sshd shares 2 cores here."""
    assert fabric.ssh_config is not None
    config = fabric.ssh_config.read_text()
    fabric.ssh_config.write_text(f"Host *\n  KexAlgorithms {LIGHT_KEX}\n\n{config}")


def login_spread(fabric: Fabric, nodes: list[str]) -> dict[str, Any]:
    """`rankscope exec -- date` on every node at once: how far apart the fan-out starts the nodes."""
    assert fabric.ssh_config is not None
    argv = fabric.netns_argv(
        "router",
        [RANKSCOPE, "exec", "--hosts", ",".join(nodes), "--via", "ssh", "--ssh-config", str(fabric.ssh_config),
         "--fanout", str(len(nodes)), "--node-timeout", "120", "--json", "--", "date +%s.%N"],
    )  # fmt: skip
    began, wall = time.perf_counter(), time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - began
    stamps = sorted(float(x) - wall for x in re.findall(r"\b1\d{9}\.\d+", proc.stdout))
    if not stamps:
        return {"seconds": round(seconds, 2), "error": proc.stderr[-500:]}
    return {"seconds": round(seconds, 2), "nodes_started": len(stamps), "first_s": round(stamps[0], 2),
            "last_s": round(stamps[-1], 2)}  # fmt: skip


def run_rankscope(fabric: Fabric, nodes: list[str], window: float, node_timeout: float) -> dict[str, Any]:
    assert fabric.ssh_config is not None
    check = fabric.check_argv(nodes, CHECK_PORT, window, RANKSCOPE)
    argv = fabric.netns_argv("router", [RANKSCOPE, *check, "--json", "--node-timeout", f"{node_timeout:g}"])
    began = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - began
    try:
        document = json.loads(proc.stdout)
    except ValueError:
        return {"seconds": round(seconds, 2), "returncode": proc.returncode, "problems": [],
                "error": proc.stderr[-2000:]}  # fmt: skip
    cells = document["matrix"]["cells"]
    return {
        "seconds": round(seconds, 2),
        "returncode": proc.returncode,
        "problems": [
            f["problem"].split(":", 2)[0] + ":" + f["problem"].split(":", 2)[1] for f in document["findings"]
        ],  # fmt: skip
        "bad_cells": sorted(
            f"{c['source']}->{c['target']} {c['verdict']}"
            for c in cells
            if c["source"] != c["target"] and c["verdict"] != "open"
        ),  # fmt: skip
        "silent": document["matrix"].get("silent", {}),
    }


def run_manual(fabric: Fabric, nodes: list[str], timeout: float, scratch: Path) -> dict[str, Any]:
    assert fabric.ssh_config is not None
    ssh = ["ssh", "-F", str(fabric.ssh_config)]
    parts = []
    for source in nodes:
        loop = "; ".join(
            f"nc -z -w {timeout:g} {fabric.addresses[p]} {MANUAL_PORT} && echo '{source} {p} ok'"
            f" || echo '{source} {p} FAIL'"
            for p in nodes
            if p != source
        )
        parts.append(shlex.join([*ssh, source, loop]))
    script = scratch / "manual.sh"  # too long for one argument at 64 nodes
    script.write_text("\n".join(parts) + "\n")
    argv = fabric.netns_argv("router", ["sh", str(script)])
    began = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - began
    failed = [tuple(line.split()[:2]) for line in proc.stdout.splitlines() if line.endswith(" FAIL")]
    probes = sum(1 for line in proc.stdout.splitlines() if line.endswith((" ok", " FAIL")))
    # what the user reads off the lines: a node nobody reaches, then the other failed pairs
    targets = {t for _, t in failed}
    dead = [t for t in sorted(targets) if sum(1 for _, x in failed if x == t) == len(nodes) - 1]
    links = sorted(f"{s} -> {t}" for s, t in failed if t not in dead)
    return {"seconds": round(seconds, 2), "probes": probes, "dead_nodes": dead, "bad_links": links}


def kill_namespace_processes(fabric: Fabric) -> None:
    """Whatever still runs inside the namespaces made here (listeners, remote probes)."""
    for namespace in fabric.net.namespaces.values():
        with contextlib.suppress(Exception):
            listed = subprocess.run(
                ["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=20
            )
            for pid in listed.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)


def one_size(
    count: int, window: float, timeout: float, manual: bool, light: bool, node_timeout: float
) -> dict[str, Any]:
    nodes = [f"n{i}" for i in range(1, count + 1)]
    bad, link = faulty(count)
    listeners: list[subprocess.Popen[bytes]] = []
    fabric = None
    with tempfile.TemporaryDirectory() as scratch:
        try:
            began = time.perf_counter()
            fabric = build_fabric(nodes, Path(scratch))
            built = time.perf_counter() - began
            plant(fabric, bad, link)
            if light:
                light_ssh(fabric)
            row: dict[str, Any] = {"nodes": count, "bad_node": bad, "bad_link": list(link),
                                   "build_s": round(built, 1), "window_s": window, "nc_timeout_s": timeout,
                                   "node_timeout_s": node_timeout}  # fmt: skip
            row["logins"] = login_spread(fabric, nodes)
            print(f"{count} nodes: logins {row['logins']}", file=sys.stderr)
            ours = run_rankscope(fabric, nodes, window, node_timeout)
            ours["exact"] = ours["problems"] == expected_problems(bad, link)
            row["rankscope"] = ours
            print(
                f"{count} nodes: rankscope {ours['seconds']} s, exact={ours['exact']} {ours['problems'][:6]}",
                file=sys.stderr,
            )
            if manual:
                for node in nodes:
                    listeners.append(subprocess.Popen(
                        fabric.netns_argv(node, ["nc", "-lk", str(MANUAL_PORT)]),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    ))  # fmt: skip
                time.sleep(1.0)
                theirs = run_manual(fabric, nodes, timeout, Path(scratch))
                one, other = link
                theirs["exact"] = theirs["dead_nodes"] == [bad] and theirs["bad_links"] == sorted(
                    [f"{one} -> {other}", f"{other} -> {one}"]
                )
                row["manual"] = theirs
                print(
                    f"{count} nodes: manual {theirs['seconds']} s, exact={theirs['exact']}", file=sys.stderr
                )
            return row
        finally:
            for proc in listeners:
                proc.kill()
                proc.wait()
            if fabric is not None:
                kill_namespace_processes(fabric)
                fabric.delete()


GPUTEST_PORT = 29611


def gputest_env(fabric: Fabric, nodes: list[str], index: int) -> dict[str, str]:
    """What `srun --ntasks-per-node 1` gives task ``index`` (block layout), plus the job's variables."""
    node = nodes[index]
    return {
        **os.environ,
        "MASTER_ADDR": fabric.addresses[nodes[0]], "MASTER_PORT": str(GPUTEST_PORT),
        "SLURM_PROCID": str(index), "SLURM_LOCALID": "0", "SLURM_NODEID": str(index),
        "SLURM_NTASKS": str(len(nodes)), "SLURM_NNODES": str(len(nodes)), "SLURM_STEP_ID": "0",
        "SLURM_STEP_NODELIST": f"n[1-{len(nodes)}]", "SLURM_STEP_TASKS_PER_NODE": f"1(x{len(nodes)})",
        "SLURMD_NODENAME": node, "GLOO_SOCKET_IFNAME": fabric.veths[node],
    }  # fmt: skip


def one_gputest(count: int, fault: str, timeout: float) -> dict[str, Any]:
    """One gloo gpu-test job, one rank per namespace node (as srun would start it), with one fault:
    ``node``: the last node's link is down; ``link``: n2 and the last node drop each other's packets."""
    nodes = [f"n{i}" for i in range(1, count + 1)]
    procs: list[subprocess.Popen[str]] = []
    fabric = None
    with tempfile.TemporaryDirectory() as scratch:
        try:
            fabric = build_fabric(nodes, Path(scratch), with_sshd=False)
            last = nodes[-1]
            if fault == "node":
                subprocess.run(fabric.netns_argv(last, ["ip", "link", "set", fabric.veths[last], "down"]),
                               check=True, timeout=20)  # fmt: skip
            elif fault == "link":
                for here, peer in (("n2", last), (last, "n2")):
                    fabric.iptables(here, "-A", "INPUT", "-s", fabric.addresses[peer], "-j", "DROP")
            argv = [
                sys.executable,
                "-m",
                "rankscope",
                "gpu-test",
                "--backend",
                "gloo",
                "--timeout",
                f"{timeout:g}",
            ]
            began = time.perf_counter()
            for index, node in enumerate(nodes):
                procs.append(subprocess.Popen(
                    fabric.netns_argv(node, argv), env=gputest_env(fabric, nodes, index),
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                ))  # fmt: skip
            rank0, _ = procs[0].communicate(timeout=timeout + 120)
            seconds = time.perf_counter() - began
            for proc in procs[1:]:
                proc.communicate(timeout=timeout + 60)
            summary = [line for line in rank0.splitlines() if line.startswith(("gpu-test:", "  "))]
            print(f"gpu-test {count} nodes, fault {fault}: {seconds:.1f} s", file=sys.stderr)
            print("\n".join(summary), file=sys.stderr)
            return {"nodes": count, "fault": fault, "timeout_s": timeout, "seconds": round(seconds, 1),
                    "exit": procs[0].returncode, "summary": summary}  # fmt: skip
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if fabric is not None:
                kill_namespace_processes(fabric)
                fabric.delete()


def isolate_everywhere(count: int, broken: int) -> dict[str, Any]:
    """`gpu-test --isolate --devices 0,1` on one node, then on every node at once through
    `rankscope exec`; on n2 the test hook breaks slot ``broken`` (a corrupting device)."""
    nodes = [f"n{i}" for i in range(1, count + 1)]
    fabric = None
    with tempfile.TemporaryDirectory() as scratch:
        try:
            fabric = build_fabric(nodes, Path(scratch))
            assert fabric.ssh_config is not None
            hook = f"export RANKSCOPE_GPUTEST_FAIL_DEVICE={broken}"
            command = (f"if ip -4 -o addr | grep -q ' {fabric.addresses['n2']}/'; then {hook}; fi; "
                       f"exec {RANKSCOPE} gpu-test --isolate --devices 0,1 --timeout 30")  # fmt: skip
            rows: dict[str, Any] = {}
            for label, hosts in (("one node", "n1"), (f"{count} nodes at once", ",".join(nodes))):
                argv = fabric.netns_argv("router", [
                    RANKSCOPE, "exec", "--hosts", hosts, "--via", "ssh", "--ssh-config", str(fabric.ssh_config),
                    "--fanout", str(count), "--node-timeout", "400", "--", command,
                ])  # fmt: skip
                began = time.perf_counter()
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                seconds = time.perf_counter() - began
                verdicts = [
                    line for line in proc.stdout.splitlines() if "gpu-test:" in line or line.startswith("==")
                ]
                rows[label] = {"seconds": round(seconds, 1), "exit": proc.returncode, "lines": verdicts}
                print(f"isolate, {label}: {seconds:.1f} s, exit {proc.returncode}", file=sys.stderr)
                print(proc.stdout[-3000:], file=sys.stderr)
            return rows
        finally:
            if fabric is not None:
                kill_namespace_processes(fabric)
                fabric.delete()


def _stop(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[32])
    parser.add_argument("--window", type=float, nargs="+", default=[5.0],
                        help="net check's --window (s): one for all sizes, or one per --nodes value")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=2.0, help="the manual loop's nc -w (s)")
    parser.add_argument("--light-ssh", action="store_true",
                        help=f"logins with KexAlgorithms {LIGHT_KEX} (both sides; less CPU per login)")  # fmt: skip
    parser.add_argument("--manual-max", type=int, default=64,
                        help="run the manual loop only up to this many nodes (it grows with N^2)")  # fmt: skip
    parser.add_argument("--node-timeout", type=float, default=30.0,
                        help="net check's --node-timeout (it raises it to the window + 76 s itself)")  # fmt: skip
    parser.add_argument("--gpu-test", type=int, metavar="K", default=0,
                        help="instead: a gloo gpu-test job over K namespace nodes, one rank each, with a node "
                             "whose link is down, then one with a pair that cannot talk")  # fmt: skip
    parser.add_argument("--gpu-test-timeout", type=float, default=20.0)
    parser.add_argument("--isolate", type=int, metavar="K", default=0,
                        help="instead: gpu-test --isolate (2 CPU slots) on one node, then on K nodes at once")  # fmt: skip
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    if args.isolate:
        rows = isolate_everywhere(args.isolate, broken=1)
        (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
        (ROOT / "bench" / "out" / "scale-isolate.json").write_text(json.dumps(rows, indent=2) + "\n")
        return
    if args.gpu_test:
        runs = [one_gputest(args.gpu_test, fault, args.gpu_test_timeout) for fault in ("node", "link")]
        out = ROOT / "bench" / "out"
        out.mkdir(parents=True, exist_ok=True)
        (out / "scale-gputest.json").write_text(json.dumps(runs, indent=2) + "\n")
        for run in runs:
            print(f"{run['nodes']} nodes, bad {run['fault']}: rank 0's verdict after {run['seconds']} s"
                  f" (--timeout {run['timeout_s']:g}), exit {run['exit']}")  # fmt: skip
            print("\n".join(run["summary"]))
        return
    ensure_nc()
    windows = args.window if len(args.window) == len(args.nodes) else [args.window[0]] * len(args.nodes)
    rows = [
        one_size(n, w, args.timeout, n <= args.manual_max, args.light_ssh, args.node_timeout)
        for n, w in zip(args.nodes, windows)
    ]
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(
        "| nodes | directed probes | window (s) | rankscope net check (s) | manual serial nc loop (s) | ratio | exact verdict (rankscope / manual) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        ours, theirs = row["rankscope"], row.get("manual")
        manual_s = f"{theirs['seconds']}" if theirs else "not run"
        ratio = f"{ours['seconds'] / theirs['seconds']:.3f}x" if theirs else "-"
        exact = f"{ours['exact']} / {theirs['exact'] if theirs else '-'}"
        probes = row["nodes"] * (row["nodes"] - 1)
        print(
            f"| {row['nodes']} | {probes} | {row['window_s']:g} | {ours['seconds']} | {manual_s} | {ratio} | {exact} |"
        )


if __name__ == "__main__":
    main()
