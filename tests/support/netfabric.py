"""Several "nodes" in network namespaces that reach each other through a router namespace, each with sshd.

Node N is namespace ``<tag>-nN`` with address 10.232.N.2/24 on a veth whose other end
(10.232.N.1) sits in the router namespace, which forwards between them. Every node runs its own
sshd on port 22; one ssh config (``ssh_config``) names them all. Names carry this process id;
:meth:`Fabric.delete` removes everything and is safe to call twice. Building, firewall rules and
deleting hold ``machine_lock("netns")`` (docs/testing.md). The addresses exist only
inside these namespaces.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tests.support.cli import CliResult
from tests.support.machine_lock import machine_lock
from tests.support.netns import Namespaces, ip
from tests.support.sshd import Sshd, start_sshd, stop_all


@dataclass
class Fabric:
    net: Namespaces
    addresses: dict[str, str] = field(default_factory=dict)
    ssh_config: Optional[Path] = None
    servers: list[Sshd] = field(default_factory=list)
    veths: dict[str, str] = field(default_factory=dict)  # node -> its interface name

    @property
    def namespaces(self) -> dict[str, str]:
        """node -> its namespace (the router's not among them)."""
        return {node: namespace for node, namespace in self.net.namespaces.items() if node != "router"}

    def netns_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``node``'s namespace (``router``: the router's)."""
        return self.net.argv(node, argv)

    def run(
        self, node: str, *args: str, timeout: float = 60, env: Optional[dict[str, str]] = None
    ) -> CliResult:
        """``rankscope ARGS`` inside ``node``'s namespace (``router``: the router's)."""
        proc = subprocess.run(
            self.netns_argv(node, [sys.executable, "-m", "rankscope", *args]),
            capture_output=True, text=True, timeout=timeout, env=env,
        )  # fmt: skip
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    def popen(self, node: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.netns_argv(node, [sys.executable, "-m", "rankscope", *args]),
            stdout=subprocess.PIPE,
            text=True,
        )

    def check_argv(
        self, nodes: Sequence[str], port: int, window: float, remote_rankscope: str, via: str = "ssh"
    ) -> list[str]:
        """``net check`` arguments over ``nodes`` by their fabric addresses (run it from the router)."""
        assert self.ssh_config is not None
        return ["net", "check", "--hosts", ",".join(nodes), "--via", via, "--ssh-config", str(self.ssh_config),
                "--remote-rankscope", remote_rankscope, "--port", str(port), "--window", f"{window:g}",
                *[f"--address={node}={self.addresses[node]}" for node in nodes]]  # fmt: skip

    def iptables(self, node: str, *rule: str) -> None:
        with machine_lock("netns"):
            self._iptables(node, *rule)

    def _iptables(self, node: str, *rule: str) -> None:
        subprocess.run(
            self.netns_argv(node, ["iptables", *rule]), check=True, capture_output=True, timeout=20
        )

    def drop(self, node: str, ports: str, source: Optional[str] = None) -> None:
        """``node``'s firewall drops TCP to ``ports`` (``"6123"``, ``"7000:7100"``), from ``source`` only if given."""
        origin = ["-s", self.addresses[source]] if source else []
        self.iptables(node, "-A", "INPUT", *origin, "-p", "tcp", "--dport", ports, "-j", "DROP")

    def delete(self) -> None:
        stop_all(self.servers)
        self.servers.clear()
        self.net.delete()


def build_fabric(nodes: Sequence[str], workdir: Path, with_sshd: bool = True) -> Fabric:
    with machine_lock("netns"):
        return _build_fabric(nodes, workdir, with_sshd)


def _build_fabric(nodes: Sequence[str], workdir: Path, with_sshd: bool) -> Fabric:
    pid = os.getpid() % 100000
    fabric = Fabric(Namespaces(f"rsnet{pid}"))
    try:
        fabric.net.add("router")
        subprocess.run(
            fabric.netns_argv("router", ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]),
            check=True,
            timeout=20,
        )
        for index, node in enumerate(nodes, start=1):
            namespace = fabric.net.add(node)
            outer, inner = f"rn{pid}r{index}", f"rn{pid}n{index}"
            fabric.net.link(("router", node), (outer, inner), (f"10.232.{index}.1", f"10.232.{index}.2"))
            ip("route", "add", "10.232.0.0/16", "via", f"10.232.{index}.1", netns=namespace)
            fabric.addresses[node] = f"10.232.{index}.2"
            fabric.veths[node] = inner
        if with_sshd:
            blocks, known = [], []
            for node in nodes:
                server = start_sshd(
                    workdir / f"sshd-{node}", listen=fabric.addresses[node], netns=fabric.namespaces[node]
                )
                fabric.servers.append(server)
                known.append(server.known_hosts.read_text())
                blocks.append(
                    f"Host {node}\n  HostName {fabric.addresses[node]}\n  Port 22\n  IdentityFile {server.client_key}"
                )
            (workdir / "known_hosts").write_text("".join(known))
            defaults = ["Host *", "  IdentitiesOnly yes", "  User root", "  BatchMode yes",
                        f"  UserKnownHostsFile {workdir / 'known_hosts'}", "  StrictHostKeyChecking yes",
                        "  CheckHostIP no", "  LogLevel ERROR"]  # fmt: skip
            fabric.ssh_config = workdir / "ssh_config"
            fabric.ssh_config.write_text("\n\n".join([*blocks, "\n".join(defaults)]) + "\n")
    except BaseException:
        fabric.delete()
        raise
    return fabric
