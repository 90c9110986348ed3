"""Network namespaces joined by veth pairs: the one builder of the tests' namespaced "nodes".

:class:`Namespaces` makes namespaces (loopback up) and veth pairs between two of them, and
deletes them all (which deletes their veths); every name carries a tag with this process id, so
parallel test runs never collide. Making, linking and deleting hold ``machine_lock("netns")``
(docs/testing.md). On top of it:

- :func:`create_client` / :class:`NetnsNodes`: nodes around a client namespace. The client holds
  one veth end per node (10.231.N.1/24), node N the other (10.231.N.2/24). A node can be left
  bare (a closed port: the kernel answers with a reset), have everything dropped by iptables (a
  black hole: no answer at all), or run a real sshd.
- :func:`veth_pair_nodes` / :class:`TwoNodes`: two namespaces joined by one veth pair, each end
  with its own interface name, so a node's ``*_SOCKET_IFNAME`` names its own end.
- ``tests/support/netfabric.py``: nodes around a router namespace that forwards between them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from tests.support.machine_lock import machine_lock


def ip(*args: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, timeout=20)


@dataclass
class Namespaces:
    """Namespaces named ``TAG-NAME``; :meth:`delete` removes them all and is safe to call twice."""

    tag: str
    namespaces: dict[str, str] = field(default_factory=dict)  # name -> namespace

    def add(self, name: str) -> str:
        """A new namespace ``TAG-NAME`` with its loopback up."""
        namespace = f"{self.tag}-{name}"
        with machine_lock("netns"):
            subprocess.run(["ip", "netns", "add", namespace], check=True, timeout=20)
            self.namespaces[name] = namespace
            ip("link", "set", "lo", "up", netns=namespace)
        return namespace

    def link(self, ends: tuple[str, str], interfaces: tuple[str, str], addresses: tuple[str, str]) -> None:
        """A veth pair between the namespaces ``ends``: ``interfaces[i]`` in ``ends[i]``, up, with
        ``addresses[i]`` (/24)."""
        with machine_lock("netns"):
            ip("link", "add", interfaces[0], "type", "veth", "peer", "name", interfaces[1])
            for name, interface, address in zip(ends, interfaces, addresses):
                namespace = self.namespaces[name]
                ip("link", "set", interface, "netns", namespace)
                ip("addr", "add", f"{address}/24", "dev", interface, netns=namespace)
                ip("link", "set", interface, "up", netns=namespace)

    def argv(self, name: str, command: Sequence[str]) -> list[str]:
        """``command`` run inside namespace ``name``."""
        return ["ip", "netns", "exec", self.namespaces[name], *command]

    def delete(self) -> None:
        with machine_lock("netns"):
            for namespace in self.namespaces.values():
                with contextlib.suppress(Exception):
                    subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=20)
        self.namespaces.clear()


def process_tag(prefix: str, modulo: int) -> str:
    """``PREFIX`` and this process id (mod ``modulo``, so that interface names stay within 15 bytes)."""
    return f"{prefix}{os.getpid() % modulo}"


@dataclass
class NetnsNodes:
    client: str
    net: Namespaces
    nodes: dict[str, str] = field(default_factory=dict)  # name -> address

    @property
    def namespaces(self) -> dict[str, str]:
        """name -> namespace of each node (the client's not among them)."""
        return {name: self.net.namespaces[name] for name in self.nodes}

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the client namespace."""
        return self.net.argv("client", argv)

    def add_node(self, name: str) -> str:
        index = len(self.nodes) + 1
        self.net.add(name)
        outer, inner = f"{self.net.tag}c{index}", f"{self.net.tag}n{index}"
        self.net.link(("client", name), (outer, inner), (f"10.231.{index}.1", f"10.231.{index}.2"))
        self.nodes[name] = f"10.231.{index}.2"
        return self.nodes[name]

    def black_hole(self, name: str) -> None:
        """Drop every packet that reaches the node: connections neither succeed nor fail."""
        with machine_lock("netns"):
            subprocess.run(
                self.net.argv(name, ["iptables", "-A", "INPUT", "-j", "DROP"]),
                check=True,
                capture_output=True,
                timeout=20,
            )

    def delete(self) -> None:
        self.net.delete()


def create_client() -> NetnsNodes:
    net = Namespaces(process_tag("rs", 10_000_000))
    client = net.add("client")
    return NetnsNodes(client=client, net=net)


@dataclass
class TwoNodes:
    namespaces: tuple[str, str]
    interfaces: tuple[str, str]
    addresses: tuple[str, str]

    def argv(self, index: int, command: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[index], *command]


@contextlib.contextmanager
def veth_pair_nodes(subnet: str = "10.232.0") -> Iterator[TwoNodes]:
    """Namespaces ``TAG-a`` and ``TAG-b`` joined by veths ``TAGa`` (SUBNET.1) and ``TAGb`` (SUBNET.2);
    deleted on the way out."""
    net = Namespaces(process_tag("gt", 1_000_000))
    try:
        namespaces = (net.add("a"), net.add("b"))
        interfaces, addresses = (f"{net.tag}a", f"{net.tag}b"), (f"{subnet}.1", f"{subnet}.2")
        net.link(("a", "b"), interfaces, addresses)
        yield TwoNodes(namespaces, interfaces, addresses)
    finally:
        net.delete()
