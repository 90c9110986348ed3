"""Network namespaces as extra nodes, joined by veth pairs to a client namespace.

The client namespace holds one veth end per node (10.231.N.1/24); node N holds the other
(10.231.N.2/24). A node can be left bare (a closed port: the kernel answers with a reset),
have everything dropped by iptables (a black hole: no answer at all), or run a real sshd.
Every name carries this process id, so parallel test runs never collide; :meth:`delete`
removes the namespaces (which removes their veths) and is safe to call twice. Creating and deleting
hold ``machine_lock("netns")`` (docs/testing.md).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.support.machine_lock import machine_lock


def ip(*args: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, timeout=20)


@dataclass
class NetnsNodes:
    client: str
    nodes: dict[str, str] = field(default_factory=dict)  # name -> address
    namespaces: dict[str, str] = field(default_factory=dict)  # name -> namespace

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the client namespace."""
        return ["ip", "netns", "exec", self.client, *argv]

    def add_node(self, name: str) -> str:
        with machine_lock("netns"):
            return self._add_node(name)

    def _add_node(self, name: str) -> str:
        index = len(self.nodes) + 1
        tag = f"rs{os.getpid() % 10_000_000}"
        namespace = f"{tag}-{name}"
        outer, inner = f"{tag}c{index}", f"{tag}n{index}"
        subprocess.run(["ip", "netns", "add", namespace], check=True, timeout=20)
        self.namespaces[name] = namespace
        ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        ip("link", "set", outer, "netns", self.client)
        ip("link", "set", inner, "netns", namespace)
        ip("addr", "add", f"10.231.{index}.1/24", "dev", outer, netns=self.client)
        ip("link", "set", outer, "up", netns=self.client)
        ip("addr", "add", f"10.231.{index}.2/24", "dev", inner, netns=namespace)
        ip("link", "set", inner, "up", netns=namespace)
        ip("link", "set", "lo", "up", netns=namespace)
        address = f"10.231.{index}.2"
        self.nodes[name] = address
        return address

    def black_hole(self, name: str) -> None:
        """Drop every packet that reaches the node: connections neither succeed nor fail."""
        with machine_lock("netns"):
            subprocess.run(
                ["ip", "netns", "exec", self.namespaces[name], "iptables", "-A", "INPUT", "-j", "DROP"],
                check=True,
                capture_output=True,
                timeout=20,
            )

    def delete(self) -> None:
        with machine_lock("netns"):
            for namespace in [*self.namespaces.values(), self.client]:
                with contextlib.suppress(Exception):
                    subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=20)
        self.namespaces.clear()


def create_client() -> NetnsNodes:
    client = f"rs{os.getpid() % 10_000_000}-client"
    with machine_lock("netns"):
        subprocess.run(["ip", "netns", "add", client], check=True, timeout=20)
        ip("link", "set", "lo", "up", netns=client)
    return NetnsNodes(client=client)
