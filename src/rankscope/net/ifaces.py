"""This node's network interfaces: what each one is (kind), its addresses, its state and its RDMA ports.

:func:`list_interfaces` is the entry point (``root`` is a sysfs tree: ``/`` here, a crafted one in
tests); :func:`classify` is the pure rule that names an interface's kind from its /sys facts.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

from rankscope.model import Words
from rankscope.net.sysfs import LinkFacts, RdmaPort, read_links, read_rdma_ports


class Kind(Words):
    ETHERNET = "Ethernet"
    INFINIBAND = "InfiniBand"
    ROCE = "RoCE"
    EFA = "EFA"
    OPA = "OPA"
    LOOPBACK = "loopback"
    DOCKER = "docker"
    BRIDGE = "bridge"
    VETH = "veth"
    BOND = "bond"
    VLAN = "vlan"
    WIRELESS = "wireless"
    TUNNEL = "tunnel"
    VIRTUAL = "virtual"


#: Kinds that never carry traffic between nodes: never recommended for *_SOCKET_IFNAME.
LOCAL_ONLY = frozenset({Kind.LOOPBACK, Kind.DOCKER})
#: On a host, a veth is a container's cable into a bridge: never a candidate by itself. Inside a
#: container or network namespace the veth *is* the uplink, which the route to a peer (or the
#: default route) shows; only then is it recommended.
ROUTE_ONLY = frozenset({Kind.VETH})
#: Preference among interfaces that could carry it, fastest fabric first.
PREFERENCE = (
    Kind.INFINIBAND,
    Kind.OPA,
    Kind.ROCE,
    Kind.EFA,
    Kind.BOND,
    Kind.ETHERNET,
    Kind.VLAN,
    Kind.BRIDGE,
)

ARPHRD_ETHER, ARPHRD_INFINIBAND, ARPHRD_LOOPBACK, ARPHRD_NONE = 1, 32, 772, 65534
_TUNNELS = frozenset({"tun", "tap", "wireguard", "vxlan", "gre", "gretap", "ipip", "sit", "geneve", "ip6tnl"})


@dataclass(frozen=True)
class Address:
    address: str
    prefixlen: int
    family: int
    #: global, link (fe80::/10, 169.254/16), host (loopback), site.
    scope: str = "global"

    @property
    def network(self) -> str:
        """The subnet in CIDR form (``10.0.0.0/24``): what Open MPI's btl_tcp_if_include accepts."""
        return str(ipaddress.ip_network(f"{self.address}/{self.prefixlen}", strict=False))

    @property
    def routable(self) -> bool:
        """An address a peer on another node could use: not loopback, not link-local."""
        ip = ipaddress.ip_address(self.address)
        return self.scope not in ("host", "link") and not (ip.is_loopback or ip.is_link_local)


@dataclass(frozen=True)
class Interface:
    name: str
    kind: Kind
    operstate: str
    mtu: Optional[int] = None
    speed_mbps: Optional[int] = None
    driver: str = ""
    addresses: tuple[Address, ...] = ()
    rdma: tuple[RdmaPort, ...] = ()
    #: The kernel's own word for a software interface (veth, bridge, ifb, ...), when it has one.
    software_kind: str = ""
    #: Why the kind was chosen, in words (which /sys fact decided).
    because: str = ""

    @property
    def up(self) -> bool:
        # lo and some virtual devices report "unknown" while they work.
        return self.operstate in ("up", "unknown")

    @property
    def routable_addresses(self) -> tuple[Address, ...]:
        return tuple(a for a in self.addresses if a.routable)


@dataclass
class NodeInterfaces:
    """Everything ``net ifaces`` gathers on one node."""

    interfaces: list[Interface]
    #: RDMA ports with no network interface of their own (EFA), shown separately.
    rdma_only: list[RdmaPort] = field(default_factory=list)
    default_route: list[str] = field(default_factory=list)


def classify(link: LinkFacts, rdma: Sequence[RdmaPort] = (), software_kind: str = "") -> tuple[Kind, str]:
    """An interface's kind and the fact that decided it (pure)."""
    layers = {port.link_layer for port in rdma}
    drivers = {port.driver for port in rdma} | {link.driver}
    if link.arphrd == ARPHRD_LOOPBACK:
        return Kind.LOOPBACK, "type 772 (loopback)"
    if "efa" in drivers:
        return Kind.EFA, "driver efa"
    if "hfi1" in drivers:
        return Kind.OPA, "driver hfi1 (Omni-Path)"
    if link.arphrd == ARPHRD_INFINIBAND:
        return Kind.INFINIBAND, "type 32 (IP over InfiniBand)"
    if link.bond or software_kind == "bond" or link.devtype == "bond":
        return Kind.BOND, "bonding master"
    if link.bridge or software_kind == "bridge" or link.devtype == "bridge":
        if link.name.startswith(("docker", "br-")):
            return Kind.DOCKER, "a bridge named like docker's"
        return Kind.BRIDGE, "bridge"
    if software_kind == "veth" or (not software_kind and not link.physical and link.name.startswith("veth")):
        return Kind.VETH, "veth pair" if software_kind else "named veth*"
    if software_kind == "vlan" or link.devtype == "vlan":
        return Kind.VLAN, "802.1Q VLAN"
    if link.devtype == "wlan":
        return Kind.WIRELESS, "DEVTYPE=wlan"
    if software_kind in _TUNNELS or link.arphrd == ARPHRD_NONE:
        return Kind.TUNNEL, software_kind or "no link layer (type 65534)"
    if "Ethernet" in layers:
        return Kind.ROCE, "an RDMA port with link_layer Ethernet (RoCE)"
    if "InfiniBand" in layers:
        return Kind.INFINIBAND, "an RDMA port with link_layer InfiniBand"
    if link.physical:
        return Kind.ETHERNET, f"a device with driver {link.driver}" if link.driver else "a device"
    return Kind.VIRTUAL, software_kind or "no device behind it"


def build_interfaces(
    links: Sequence[LinkFacts],
    rdma_ports: Sequence[RdmaPort] = (),
    addresses: Mapping[str, Sequence[Address]] | None = None,
    software_kinds: Mapping[str, str] | None = None,
) -> NodeInterfaces:
    """Facts in, classified interfaces out (pure)."""
    addresses = addresses or {}
    software_kinds = software_kinds or {}
    ports_of: dict[str, list[RdmaPort]] = {}
    for port in rdma_ports:
        for netdev in port.netdevs:
            ports_of.setdefault(netdev, []).append(port)
    interfaces = []
    for link in links:
        ports = ports_of.get(link.name, [])
        kind, because = classify(link, ports, software_kinds.get(link.name, ""))
        interfaces.append(
            Interface(
                name=link.name,
                kind=kind,
                operstate=link.operstate,
                mtu=link.mtu,
                speed_mbps=link.speed_mbps,
                driver=link.driver,
                addresses=tuple(addresses.get(link.name, ())),
                rdma=tuple(ports),
                software_kind=software_kinds.get(link.name, ""),
                because=because,
            )
        )
    names = {link.name for link in links}
    rdma_only = [p for p in rdma_ports if not any(n in names for n in p.netdevs)]
    return NodeInterfaces(interfaces, rdma_only)


def list_interfaces(root: str = "/") -> list[Interface]:
    """This node's interfaces (``root`` other than ``/``: a crafted sysfs tree, read without addresses)."""
    return gather(root).interfaces


def gather(root: str = "/") -> NodeInterfaces:
    """Interfaces, RDMA ports and default routes of this node (or of the sysfs tree at ``root``).

    Addresses and software kinds come from the kernel (netlink) only for the live tree.
    """
    from rankscope.net.sysfs import default_route_interfaces

    links = read_links(root)
    addresses: dict[str, list[Address]] = {}
    kinds: dict[str, str] = {}
    if root == "/":
        from rankscope.net import netlink

        by_index = {link.index: link.name for link in links}
        try:
            for found in netlink.addresses():
                name = by_index.get(found.index)
                if name is not None:
                    addresses.setdefault(name, []).append(
                        Address(found.address, found.prefixlen, found.family, found.scope)
                    )
            kinds = netlink.link_kinds()
        except OSError:
            pass  # no netlink (a sandbox without it): interfaces are still listed, without addresses
    result = build_interfaces(links, read_rdma_ports(root), addresses, kinds)
    result.default_route = default_route_interfaces(root)
    return result
