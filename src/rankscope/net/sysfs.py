"""What /sys says about network devices and RDMA ports: the only reader of /sys/class/net and /sys/class/infiniband.

Every function takes ``root`` (``/`` on a real node, a crafted tree in tests) and never raises for a
missing or unreadable file: a fact it cannot read is left empty.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass(frozen=True)
class RdmaPort:
    """One port of an RDMA device (``mlx5_0`` port 1): its state and what it runs on."""

    device: str
    port: int
    #: ACTIVE, DOWN, INIT, ARMED (the word after "4: " in ports/N/state).
    state: str
    #: InfiniBand, Ethernet (RoCE) or Unspecified (EFA).
    link_layer: str
    rate: str = ""
    #: The driver of the device (mlx5_core, efa, hfi1, ...).
    driver: str = ""
    #: Network interfaces on the same device (ib0, ens1f0np0); empty for EFA.
    netdevs: tuple[str, ...] = ()


@dataclass(frozen=True)
class LinkFacts:
    """The raw facts about one network interface, as /sys has them."""

    name: str
    index: int
    #: The ARPHRD type: 1 Ethernet, 32 InfiniBand (IPoIB), 772 loopback, 65534 none (tunnels).
    arphrd: int
    operstate: str
    mtu: Optional[int]
    speed_mbps: Optional[int]
    #: The driver of the underlying device (virtio_net, mlx5_core, ena, efa, hfi1); "" when virtual.
    driver: str
    #: DEVTYPE from uevent: vlan, bridge, bond, wlan, ...
    devtype: str
    #: Backed by a device (PCI, virtio), not a software interface.
    physical: bool
    bridge: bool
    bond: bool


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def _int(text: str) -> Optional[int]:
    try:
        return int(text)
    except ValueError:
        return None


def _driver(device: Path) -> str:
    try:
        return os.path.basename(os.readlink(device / "driver"))
    except OSError:
        return ""


def _uevent(path: Path) -> dict[str, str]:
    pairs = (line.partition("=") for line in _read(path / "uevent").splitlines())
    return {key: value for key, sep, value in pairs if sep}


def read_links(root: str = "/") -> list[LinkFacts]:
    """Every interface under ``root``/sys/class/net, sorted by index then name."""
    base = Path(root, "sys/class/net")
    try:
        names = sorted(entry.name for entry in base.iterdir())
    except OSError:
        return []
    links = []
    for name in names:
        path = base / name
        if not (path / "type").exists() and not (path / "operstate").exists():
            continue  # bonding_masters and other files that are not interfaces
        speed = _int(_read(path / "speed"))
        links.append(
            LinkFacts(
                name=name,
                index=_int(_read(path / "ifindex")) or 0,
                arphrd=_int(_read(path / "type")) or 0,
                operstate=_read(path / "operstate") or "unknown",
                mtu=_int(_read(path / "mtu")),
                speed_mbps=speed if speed is not None and speed > 0 else None,
                driver=_driver(path / "device"),
                devtype=_uevent(path).get("DEVTYPE", ""),
                physical=(path / "device").exists(),
                bridge=(path / "bridge").is_dir(),
                bond=(path / "bonding").is_dir(),
            )
        )
    return sorted(links, key=lambda link: (link.index, link.name))


def read_rdma_ports(root: str = "/") -> list[RdmaPort]:
    """Every port of every device under ``root``/sys/class/infiniband (empty on a node without RDMA)."""
    base = Path(root, "sys/class/infiniband")
    try:
        devices = sorted(entry.name for entry in base.iterdir())
    except OSError:
        return []
    ports = []
    for device in devices:
        path = base / device
        try:
            netdevs = tuple(sorted(entry.name for entry in (path / "device" / "net").iterdir()))
        except OSError:
            netdevs = ()
        try:
            numbers = sorted(int(p.name) for p in (path / "ports").iterdir() if p.name.isdigit())
        except OSError:
            numbers = []
        for number in numbers:
            port = path / "ports" / str(number)
            ports.append(
                RdmaPort(
                    device=device,
                    port=number,
                    state=_read(port / "state").partition(":")[2].strip() or _read(port / "state"),
                    link_layer=_read(port / "link_layer"),
                    rate=_read(port / "rate"),
                    driver=_driver(path / "device"),
                    netdevs=netdevs,
                )
            )
    return ports


def default_route_interfaces(root: str = "/") -> list[str]:
    """Interfaces that carry an IPv4 default route (``root``/proc/net/route: this network namespace)."""
    found = []
    for line in _read(Path(root, "proc/net/route")).splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[1] == "00000000" and fields[7] == "00000000":
            found.append(fields[0])
    return found
