"""Two network namespaces joined by one veth pair: two "nodes" that reach each other only over it.

Each end keeps its own interface name (`<tag>a`, `<tag>b`), so a node's *_SOCKET_IFNAME names its
own end. Names carry this process id; everything is deleted on the way out. Creating and deleting
hold ``machine_lock("netns")`` (docs/testing.md).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tests.support.machine_lock import machine_lock


@dataclass
class TwoNodes:
    namespaces: tuple[str, str]
    interfaces: tuple[str, str]
    addresses: tuple[str, str]

    def argv(self, index: int, command: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[index], *command]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


@contextlib.contextmanager
def veth_pair_nodes(subnet: str = "10.232.0") -> Iterator[TwoNodes]:
    tag = f"gt{os.getpid() % 1_000_000}"
    nodes = TwoNodes((f"{tag}-a", f"{tag}-b"), (f"{tag}a", f"{tag}b"), (f"{subnet}.1", f"{subnet}.2"))
    try:
        with machine_lock("netns"):
            for ns in nodes.namespaces:
                _ip("netns", "add", ns)
            _ip("link", "add", nodes.interfaces[0], "type", "veth", "peer", "name", nodes.interfaces[1])
            for ns, iface, address in zip(nodes.namespaces, nodes.interfaces, nodes.addresses):
                _ip("link", "set", iface, "netns", ns)
                _ip("-n", ns, "addr", "add", f"{address}/24", "dev", iface)
                _ip("-n", ns, "link", "set", iface, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        yield nodes
    finally:
        with machine_lock("netns"):
            for ns in nodes.namespaces:
                with contextlib.suppress(subprocess.SubprocessError):
                    _ip("netns", "del", ns)
