"""Port reachability: `rankscope net probe` / `net check` against the manual `nc -zv -w T` loop.

Everything runs in private network namespaces (tests/support/netfabric.py): nodes n1..nN reach
each other through a router namespace, each with its own sshd.

probe: from the router, PORTS ports on each of 4 nodes: n1 listens on all of them (open), n2 on
none (refused), n3 drops everything (filtered), n4 drops half of them. The manual line is the
guide's loop, one target after the other: `for t in ...; do nc -zv -w T host port; done`.

check: every node to every other node on one port, both ways, with one node whose firewall drops
the port. Manual: a listener (`nc -lk`) on every node, then for each node in turn
`ssh NODE 'for peer in ...; do nc -zv -w T peer PORT; done'` (the guide's "terminal A, then
terminal B"). rankscope: one `net check --hosts ... --window T`.

    sudo flock /tmp/rankscope-system.lock .venv/bin/python bench/bench_net.py [--nodes 6] [--ports 8]
        [--timeout 2] [--repeat 3]

Installs netcat-openbsd if `nc` is missing. Prints a Markdown table (docs/benchmarks.md) and
writes bench/out/net.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.netfabric import Fabric, build_fabric  # noqa: E402

RANKSCOPE = str(Path(sys.executable).with_name("rankscope"))
FIRST_PORT = 7001
CHECK_PORT = 7100


def ensure_nc() -> None:
    if shutil.which("nc") is None:
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "netcat-openbsd"], check=True,
                       capture_output=True)  # fmt: skip


def timed(argv: list[str], timeout: float = 600) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - began, proc


def nc_verdicts(output: str) -> list[str]:
    """nc -zv's lines as verdicts: succeeded -> open, refused -> refused, timed out -> filtered."""
    verdicts = []
    for line in output.splitlines():
        if "succeeded" in line:
            verdicts.append("open")
        elif "refused" in line:
            verdicts.append("refused")
        elif "timed out" in line:
            verdicts.append("filtered")
    return verdicts


def probe_rows(fabric: Fabric, ports: int, timeout: float) -> list[tuple[str, list[str], object]]:
    targets = [(fabric.addresses[n], FIRST_PORT + i) for n in ("n1", "n2", "n3", "n4") for i in range(ports)]
    loop = "; ".join(f"nc -zv -w {timeout:g} {host} {port} 2>&1" for host, port in targets)
    manual = fabric.netns_argv("router", ["sh", "-c", loop])
    ours = fabric.netns_argv(
        "router",
        [RANKSCOPE, "net", "probe", "--json", "--timeout", f"{timeout:g}", *[f"{h}:{p}" for h, p in targets]],
    )
    return [
        ("manual", manual, nc_verdicts),
        ("rankscope", ours, lambda out: [r["verdict"] for r in json.loads(out)["results"]]),
    ]


def check_rows(fabric: Fabric, nodes: list[str], timeout: float) -> list[tuple[str, list[str], object]]:
    assert fabric.ssh_config is not None
    ssh = ["ssh", "-F", str(fabric.ssh_config)]
    parts = []
    for source in nodes:
        peers = "; ".join(
            f"nc -zv -w {timeout:g} {fabric.addresses[p]} {CHECK_PORT} 2>&1" for p in nodes if p != source
        )
        parts.append(shlex.join([*ssh, source, peers]))
    manual = fabric.netns_argv("router", ["sh", "-c", "; ".join(parts)])
    ours = fabric.netns_argv(
        "router",
        [RANKSCOPE, "net", "check", "--json", "--hosts", ",".join(nodes), "--via", "ssh",
         "--ssh-config", str(fabric.ssh_config), "--remote-rankscope", RANKSCOPE, "--port", str(CHECK_PORT),
         "--window", f"{timeout:g}", *[f"--address={n}={fabric.addresses[n]}" for n in nodes]],
    )  # fmt: skip

    def matrix(out: str) -> list[str]:
        cells = json.loads(out)["matrix"]["cells"]
        return [c["verdict"] for c in cells if c["source"] != c["target"]]

    return [("manual", manual, nc_verdicts), ("rankscope", ours, matrix)]


def measure(rows: list[tuple[str, list[str], object]], repeat: int) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for _name, argv, _ in rows:  # warm-up
        timed(argv)
    times: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    verdicts: dict[str, list[str]] = {}
    for _ in range(repeat):
        for name, argv, parse in rows:
            seconds, proc = timed(argv)
            times[name].append(seconds)
            verdicts[name] = parse(proc.stdout)  # type: ignore[operator]
    for name in times:
        out[name] = {"median_s": round(statistics.median(times[name]), 3), "runs": [round(t, 3) for t in times[name]],
                     "verdicts": {v: verdicts[name].count(v) for v in sorted(set(verdicts[name]))}}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--ports", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ensure_nc()
    nodes = [f"n{i}" for i in range(1, max(4, args.nodes) + 1)]
    listeners: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as scratch:
        fabric = build_fabric(nodes, Path(scratch))
        try:
            serve = (
                "import socket, time\nsocks = []\n"
                f"for p in range({FIRST_PORT}, {FIRST_PORT + args.ports}):\n"
                "    s = socket.socket(); s.bind(('0.0.0.0', p)); s.listen(64); socks.append(s)\n"
                "time.sleep(3600)\n"
            )
            listeners.append(subprocess.Popen(fabric.netns_argv("n1", [sys.executable, "-c", serve])))
            fabric.iptables(
                "n3", "-A", "INPUT", "-p", "tcp", "--dport", f"{FIRST_PORT}:{FIRST_PORT + 99}", "-j", "DROP"
            )
            half = FIRST_PORT + args.ports // 2
            fabric.iptables(
                "n4", "-A", "INPUT", "-p", "tcp", "--dport", f"{FIRST_PORT}:{half - 1}", "-j", "DROP"
            )
            # check: n3's firewall drops the check port; the manual loop needs a listener on every node.
            fabric.iptables("n3", "-A", "INPUT", "-p", "tcp", "--dport", str(CHECK_PORT), "-j", "DROP")
            time.sleep(0.5)
            probe = measure(probe_rows(fabric, args.ports, args.timeout), args.repeat)
            manual_listeners = [
                subprocess.Popen(
                    fabric.netns_argv(n, ["nc", "-lk", str(CHECK_PORT)]), stdout=subprocess.DEVNULL
                )
                for n in nodes
            ]
            time.sleep(0.5)
            manual_check = measure(check_rows(fabric, nodes, args.timeout)[:1], args.repeat)
            for proc in manual_listeners:
                proc.kill()
                proc.wait()
            time.sleep(0.5)
            ours_check = measure(check_rows(fabric, nodes, args.timeout)[1:], args.repeat)
        finally:
            for proc in listeners:
                proc.kill()
                proc.wait()
            fabric.delete()
    results = {
        "timeout_s": args.timeout, "probe_targets": 4 * args.ports, "check_nodes": len(nodes),
        "probe": probe, "check": {**manual_check, **ours_check},
    }  # fmt: skip
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "net.json").write_text(json.dumps(results, indent=2) + "\n")
    print("| what | manual `nc -zv -w T` loop (s) | rankscope (s) | ratio | verdicts (manual / rankscope) |")
    print("|---|---:|---:|---:|---|")
    for label, part in ((f"probe {4 * args.ports} ports on 4 hosts", probe),
                        (f"check {len(nodes)} nodes, all pairs both ways", results["check"])):  # fmt: skip
        manual, ours = part["manual"], part["rankscope"]
        ratio = float(ours["median_s"]) / float(manual["median_s"])  # type: ignore[arg-type]
        print(f"| {label} | {manual['median_s']} | {ours['median_s']} | {ratio:.2f}x | "
              f"{manual['verdicts']} / {ours['verdicts']} |")  # fmt: skip


if __name__ == "__main__":
    main()
