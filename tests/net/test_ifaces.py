"""`net ifaces`: kinds from /sys, the recommendation, the host-name warning.

The InfiniBand, RoCE, EFA, OPA, bond, vlan and docker branches cannot occur on this machine (one
virtio Ethernet, no RDMA): they run on crafted /sys trees laid out as the kernel lays them out.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from pathlib import Path

import pytest
from tests.support.cli import run_cli

from rankscope.net.advice import hostname_findings, recommend
from rankscope.net.ifaces import Address, Interface, Kind, build_interfaces, gather, list_interfaces
from rankscope.net.probe import hostname_addresses
from rankscope.net.sysfs import read_links, read_rdma_ports


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def netdev(
    root: Path, name: str, index: int, arphrd: int = 1, operstate: str = "up", driver: str = "",
    devtype: str = "", speed: int = -1, mtu: int = 1500, pci: str = "",
) -> Path:  # fmt: skip
    path = root / "sys/class/net" / name
    write(path / "type", str(arphrd))
    write(path / "ifindex", str(index))
    write(path / "operstate", operstate)
    write(path / "mtu", str(mtu))
    write(path / "speed", str(speed))
    write(path / "uevent", f"INTERFACE={name}\nIFINDEX={index}" + (f"\nDEVTYPE={devtype}" if devtype else ""))
    if pci:
        device = root / "sys/devices/pci0000:00" / pci
        device.mkdir(parents=True, exist_ok=True)
        (path / "device").symlink_to(device)
        if driver:
            drivers = root / "sys/bus/pci/drivers" / driver
            drivers.mkdir(parents=True, exist_ok=True)
            if not (device / "driver").exists():
                (device / "driver").symlink_to(drivers)
    return path


def rdma(
    root: Path, device: str, pci: str, driver: str, ports: dict[int, tuple[str, str]], netdevs: list[str]
) -> None:
    base = root / "sys/class/infiniband" / device
    dev = root / "sys/devices/pci0000:00" / pci
    dev.mkdir(parents=True, exist_ok=True)
    base.mkdir(parents=True, exist_ok=True)
    (base / "device").symlink_to(dev)
    drivers = root / "sys/bus/pci/drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    if not (dev / "driver").exists():
        (dev / "driver").symlink_to(drivers)
    for name in netdevs:
        (dev / "net" / name).mkdir(parents=True, exist_ok=True)
    for number, (state, layer) in ports.items():
        write(base / "ports" / str(number) / "state", state)
        write(base / "ports" / str(number) / "link_layer", layer)
        write(base / "ports" / str(number) / "rate", "200 Gb/sec (4X HDR)")


@pytest.fixture
def crafted(tmp_path: Path) -> Path:
    """A GPU node as /sys shows it: IPoIB, RoCE, EFA, OPA, a bond with a vlan, docker, a veth."""
    root = tmp_path
    netdev(root, "lo", 1, arphrd=772, operstate="unknown", mtu=65536)
    netdev(root, "eno1", 2, driver="ixgbe", pci="0000:01:00.0", speed=10000)
    netdev(root, "ib0", 3, arphrd=32, driver="mlx5_core", pci="0000:02:00.0", mtu=4092, speed=200000)
    netdev(root, "ib1", 4, arphrd=32, driver="mlx5_core", pci="0000:03:00.0", operstate="down")
    netdev(root, "ens1f0np0", 5, driver="mlx5_core", pci="0000:04:00.0", speed=100000)
    netdev(root, "hfi1_0", 6, arphrd=32, driver="hfi1", pci="0000:05:00.0")
    netdev(root, "efa0", 7, driver="efa", pci="0000:06:00.0")
    bond = netdev(root, "bond0", 8)
    (bond / "bonding").mkdir()
    netdev(root, "bond0.100", 9, devtype="vlan")
    docker = netdev(root, "docker0", 10)
    (docker / "bridge").mkdir()
    br = netdev(root, "br0", 11)
    (br / "bridge").mkdir()
    netdev(root, "veth1a2b", 12)
    netdev(root, "wg0", 13, arphrd=65534)
    write(root / "sys/class/net/bonding_masters", "bond0")  # a file, not an interface
    rdma(root, "mlx5_0", "0000:02:00.0", "mlx5_core", {1: ("4: ACTIVE", "InfiniBand")}, ["ib0"])
    rdma(root, "mlx5_1", "0000:03:00.0", "mlx5_core", {1: ("1: DOWN", "InfiniBand")}, ["ib1"])
    rdma(root, "mlx5_2", "0000:04:00.0", "mlx5_core", {1: ("4: ACTIVE", "Ethernet")}, ["ens1f0np0"])
    rdma(root, "efa_0", "0000:07:00.0", "efa", {1: ("4: ACTIVE", "Unspecified")}, [])
    write(root / "proc/net/route", "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n"
          "eno1\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\n"
          "ib0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF")  # fmt: skip
    return root


def test_crafted_tree_kinds(crafted: Path) -> None:
    kinds = {i.name: i.kind for i in list_interfaces(str(crafted))}
    assert kinds == {
        "lo": Kind.LOOPBACK, "eno1": Kind.ETHERNET, "ib0": Kind.INFINIBAND, "ib1": Kind.INFINIBAND,
        "ens1f0np0": Kind.ROCE, "hfi1_0": Kind.OPA, "efa0": Kind.EFA, "bond0": Kind.BOND,
        "bond0.100": Kind.VLAN, "docker0": Kind.DOCKER, "br0": Kind.BRIDGE, "veth1a2b": Kind.VETH,
        "wg0": Kind.TUNNEL,
    }  # fmt: skip


def test_crafted_tree_ib_port_states_and_rdma_only_devices(crafted: Path) -> None:
    found = gather(str(crafted))
    by_name = {i.name: i for i in found.interfaces}
    assert [(p.device, p.state, p.link_layer) for p in by_name["ib0"].rdma] == [
        ("mlx5_0", "ACTIVE", "InfiniBand")
    ]
    assert [(p.device, p.state) for p in by_name["ib1"].rdma] == [("mlx5_1", "DOWN")]
    assert by_name["ens1f0np0"].rdma[0].link_layer == "Ethernet"
    # EFA has no network interface of its own: listed apart, with its driver.
    assert [(p.device, p.driver, p.link_layer) for p in found.rdma_only] == [("efa_0", "efa", "Unspecified")]
    assert found.default_route == ["eno1"]
    assert by_name["ib0"].speed_mbps == 200000 and by_name["ib0"].mtu == 4092
    assert by_name["eno1"].driver == "ixgbe"
    assert by_name["ib1"].operstate == "down"


def with_addresses(root: Path, addresses: dict[str, str]) -> list[Interface]:
    """The crafted interfaces with addresses (``10.0.0.5/24``) as the kernel would report them."""
    found = {
        name: [Address(text.split("/")[0], int(text.split("/")[1]), 4)] for name, text in addresses.items()
    }
    return build_interfaces(read_links(str(root)), read_rdma_ports(str(root)), found).interfaces


def test_recommendation_follows_the_route_to_the_peer(crafted: Path) -> None:
    interfaces = with_addresses(
        crafted,
        {"lo": "127.0.0.1/8", "eno1": "10.0.0.5/24", "ib0": "192.168.7.5/24", "docker0": "172.17.0.1/16"},
    )
    rec = recommend(interfaces, ["eno1"], peer="192.168.7.9", source_address="192.168.7.5")
    assert (rec.interface, rec.nccl_socket_ifname, rec.gloo_socket_ifname) == ("ib0", "ib0", "ib0")
    assert rec.mpi_tcp_if_include == "192.168.7.0/24"
    assert "routes to 192.168.7.9 through ib0" in rec.reason
    assert rec.alternatives == ["eno1 (Ethernet, 10.0.0.5)"]
    assert "export NCCL_SOCKET_IFNAME=ib0" in rec.exports()


def test_recommendation_without_peer_takes_the_default_route_never_docker_or_lo(crafted: Path) -> None:
    interfaces = with_addresses(
        crafted, {"lo": "127.0.0.1/8", "eno1": "10.0.0.5/24", "docker0": "172.17.0.1/16"}
    )
    rec = recommend(interfaces, ["eno1"])
    assert rec.interface == "eno1" and "default route" in rec.reason
    # No default route: the fastest fabric with an address; docker and lo never.
    interfaces = with_addresses(crafted, {"lo": "127.0.0.1/8", "eno1": "10.0.0.5/24", "ib0": "192.168.7.5/24",
                                          "docker0": "172.17.0.1/16", "veth1a2b": "169.254.3.3/16"})  # fmt: skip
    rec = recommend(interfaces, [])
    assert rec.interface == "ib0" and "fastest" in rec.reason
    only_local = with_addresses(crafted, {"lo": "127.0.0.1/8", "docker0": "172.17.0.1/16"})
    rec = recommend(only_local, [])
    assert rec.interface is None and "single-node job only" in rec.reason


def test_a_veth_is_recommended_only_when_the_route_leaves_by_it() -> None:
    veth = Interface("eth0", Kind.VETH, "up", addresses=(Address("10.244.1.7", 24, 4),))
    lo = Interface("lo", Kind.LOOPBACK, "unknown", addresses=(Address("127.0.0.1", 8, 4, "host"),))
    assert recommend([lo, veth], []).interface is None
    rec = recommend([lo, veth], [], peer="10.244.1.9", source_address="10.244.1.7")
    assert rec.interface == "eth0" and "container or a network namespace" in rec.reason
    assert recommend([lo, veth], ["eth0"]).interface == "eth0"  # a pod: its veth carries the default route


def test_peer_on_this_node_falls_back_to_the_default_route() -> None:
    eth = Interface("eth0", Kind.ETHERNET, "up", addresses=(Address("10.0.0.5", 24, 4),))
    lo = Interface("lo", Kind.LOOPBACK, "unknown", addresses=(Address("127.0.0.1", 8, 4, "host"),))
    rec = recommend([lo, eth], ["eth0"], peer="localhost", source_address="127.0.0.1")
    assert rec.interface == "eth0" and rec.reason.startswith("localhost is this node")


def test_hostname_findings_on_crafted_resolver_answers() -> None:
    eth = Interface("eth0", Kind.ETHERNET, "up", addresses=(Address("10.0.0.5", 24, 4),))
    rec = recommend([eth], ["eth0"])
    [finding] = hostname_findings("node7", ["127.0.1.1"], rec)
    assert "resolves to 127.0.1.1 (loopback)" in finding.problem
    assert "GLOO_SOCKET_IFNAME=eth0" in finding.fix and "`10.0.0.5 node7`" in finding.fix
    assert hostname_findings("node7", ["10.0.0.5"], rec) == []
    assert "::1" in hostname_findings("node7", ["::1", "10.0.0.5"], rec)[0].problem
    [unresolved] = hostname_findings("node7", None, rec)
    assert "does not resolve" in unresolved.problem


def test_hostname_check_on_this_machine_matches_its_resolver() -> None:
    name, resolved = hostname_addresses()
    assert name == socket.gethostname()
    expected = [a for a in socket.getaddrinfo(name, None)]
    assert resolved is not None and set(resolved) == {str(a[4][0]) for a in expected}
    loopback = any(ipaddress.ip_address(a).is_loopback for a in resolved)
    assert bool(hostname_findings(name, resolved)) == loopback


def test_this_machine_lo_is_loopback_and_addresses_come_from_the_kernel() -> None:
    by_name = {i.name: i for i in list_interfaces()}
    assert by_name["lo"].kind is Kind.LOOPBACK
    assert "127.0.0.1" in {a.address for a in by_name["lo"].addresses}
    assert set(by_name) == set(os.listdir("/sys/class/net"))
    for name, interface in by_name.items():
        assert interface.mtu == int(Path(f"/sys/class/net/{name}/mtu").read_text())


def test_cli_ifaces_json_and_text() -> None:
    result = run_cli("net", "ifaces", "--json")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert document["schema"] == "rankscope.net.ifaces/1"
    kinds = {i["name"]: i["kind"] for i in document["interfaces"]}
    assert kinds["lo"] == "loopback"
    assert document["recommendation"]["nccl_socket_ifname"] != "lo"
    text = run_cli("net", "ifaces").stdout
    assert re.search(r"^  lo +loopback +unknown +65536 ", text, re.M), text
    if document["findings"]:
        assert "WARNING: this host's name" in text
