"""Which interface a multi-node job should name, and the host-name pitfall (pure: facts in, advice out).

Wording lives next to the rule that decides it, so a test reads the same sentence the user does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from rankscope.net.ifaces import LOCAL_ONLY, PREFERENCE, ROUTE_ONLY, Interface, Kind
from rankscope.net.ifname import is_loopback


@dataclass(frozen=True)
class Recommendation:
    """What to export so that every backend uses the interface that reaches the other nodes."""

    interface: Optional[str]
    reason: str
    nccl_socket_ifname: Optional[str] = None
    gloo_socket_ifname: Optional[str] = None
    #: Open MPI's ``--mca btl_tcp_if_include`` value: the subnet, which holds when names differ per node.
    mpi_tcp_if_include: Optional[str] = None
    #: The interface's routable address (what this host's name should resolve to).
    address: Optional[str] = None
    #: Other interfaces that could carry it (``ib0 (InfiniBand, 172.0.0.50)``).
    alternatives: list[str] = field(default_factory=list)

    def exports(self) -> list[str]:
        if self.interface is None:
            return []
        return [
            f"export NCCL_SOCKET_IFNAME={self.nccl_socket_ifname}",
            f"export GLOO_SOCKET_IFNAME={self.gloo_socket_ifname}",
            f"mpirun --mca btl_tcp_if_include {self.mpi_tcp_if_include} ...",
        ]


@dataclass(frozen=True)
class Finding:
    """A problem found, and the exact fix."""

    problem: str
    fix: str


def candidates(interfaces: Sequence[Interface]) -> list[Interface]:
    """Interfaces that could carry traffic to other nodes: up, a routable address, not lo/docker/veth.

    Ordered fastest fabric first (InfiniBand, OPA, RoCE, EFA, bond, Ethernet, vlan, bridge).
    """
    usable = [
        i
        for i in interfaces
        if i.kind not in LOCAL_ONLY and i.kind not in ROUTE_ONLY and i.up and i.routable_addresses
    ]
    rank = {kind: n for n, kind in enumerate(PREFERENCE)}
    return sorted(usable, key=lambda i: rank.get(i.kind, len(rank)))


def describe(interface: Interface) -> str:
    address = interface.routable_addresses[0].address if interface.routable_addresses else "no address"
    return f"{interface.name} ({interface.kind}, {address})"


def _owner(interfaces: Sequence[Interface], address: str) -> Optional[Interface]:
    for interface in interfaces:
        if any(a.address == address for a in interface.addresses):
            return interface
    return None


def recommend(
    interfaces: Sequence[Interface],
    default_route: Sequence[str] = (),
    peer: Optional[str] = None,
    source_address: Optional[str] = None,
) -> Recommendation:
    """The interface to name in NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / btl_tcp_if_include, and why.

    ``peer`` is another node of the job and ``source_address`` the address the kernel would send
    from to reach it: the interface that owns it is, by definition, the one that carries the route.
    Without a peer, the interface of the default route is chosen when it qualifies, else the
    fastest candidate.
    """
    usable = candidates(interfaces)
    chosen: Optional[Interface] = None
    reason = ""
    if peer is not None and source_address is not None:
        owner = _owner(interfaces, source_address)
        if owner is not None and owner.kind is Kind.LOOPBACK:
            reason = f"{peer} is this node (name another node with --peer); "
        elif owner is not None and owner.kind in LOCAL_ONLY:
            return Recommendation(
                None,
                f"the route to {peer} leaves through {owner.name} ({owner.kind}), which does not reach other "
                "nodes: is that the right peer, or is this a container with its own network?",
            )
        elif owner is not None:
            chosen = owner
            reason = f"the kernel routes to {peer} through {owner.name} (source address {source_address})"
            if owner.kind in ROUTE_ONLY:
                reason += "; a veth as the uplink: this is a container or a network namespace"
    elif peer is not None:
        reason = f"{peer} does not resolve or has no route from here; "
    if chosen is None:
        on_default = [
            i
            for i in interfaces
            if i.name in default_route and i.kind not in LOCAL_ONLY and i.up and i.routable_addresses
        ]
        if on_default:
            chosen = on_default[0]
            reason += f"{chosen.name} carries the default route; pass --peer ADDR (another node) to be sure"
        elif usable:
            chosen = usable[0]
            reason += f"{chosen.name} is the fastest interface with a routable address ({chosen.kind})"
        else:
            return Recommendation(
                None,
                reason + "no interface with a routable address is up besides lo, docker bridges and veths "
                "without a route (in a container or namespace, pass --peer ANOTHER_NODE); as it is, this "
                "node can run a single-node job only (NCCL_SOCKET_IFNAME=lo)",
            )
    address = chosen.routable_addresses[0] if chosen.routable_addresses else None
    return Recommendation(
        interface=chosen.name,
        reason=reason,
        nccl_socket_ifname=chosen.name,
        gloo_socket_ifname=chosen.name,
        mpi_tcp_if_include=address.network if address else chosen.name,
        address=address.address if address else None,
        alternatives=[describe(i) for i in usable if i is not chosen],
    )


def hostname_findings(
    hostname: str, resolved: Optional[Sequence[str]], recommendation: Optional[Recommendation] = None
) -> list[Finding]:
    """The host-name pitfall: ``hostname`` resolving to a loopback address (or to nothing).

    gloo (and torch's TCP store clients) pick the address this host's name resolves to when no
    interface is named; a loopback one is advertised to the peers, which then connect to
    themselves and wait until the process-group timeout.
    """
    iface = recommendation.interface if recommendation and recommendation.interface else "IFACE"
    ip = recommendation.address if recommendation and recommendation.address else "ADDR"
    name_fix = (
        f"export GLOO_SOCKET_IFNAME={iface} NCCL_SOCKET_IFNAME={iface} on every node, or map {hostname} to "
        f"this node's routable address in /etc/hosts (`{ip} {hostname}`) instead of 127.x"
    )
    if resolved is None or not resolved:
        return [
            Finding(
                f"this host's name {hostname!r} does not resolve: gloo cannot pick an address to advertise",
                name_fix,
            )
        ]
    loopback = [a for a in resolved if is_loopback(a)]
    if not loopback:
        return []
    return [
        Finding(
            f"this host's name {hostname!r} resolves to {', '.join(loopback)} (loopback): without "
            "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME a multi-node job advertises 127.x to its peers, "
            "which connect to themselves and hang until the process-group timeout",
            name_fix,
        )
    ]
