"""The one reading of *_SOCKET_IFNAME values and loopback addresses that doctor, gpu-test and net share."""

from __future__ import annotations

import pytest

from rankscope.net.ifname import is_loopback, missing_interfaces

HERE = ["lo", "eth0", "eth1", "ib0"]


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.1.1", True),  # Debian's /etc/hosts line for the host's own name
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("::", False),
        ("1270::1", False),
    ],
)
def test_loopback_addresses(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


@pytest.mark.parametrize(
    ("variable", "value", "missing"),
    [
        ("NCCL_SOCKET_IFNAME", "eth", []),  # a prefix
        ("NCCL_SOCKET_IFNAME", "=eth", ["eth"]),  # exact: no interface is called "eth"
        ("NCCL_SOCKET_IFNAME", "eth0,bond0", ["bond0"]),
        ("NCCL_SOCKET_IFNAME", "^docker,lo", []),
        ("NCCL_SOCKET_IFNAME", "^lo,eth,ib", ["^lo,eth,ib"]),  # excludes every interface
        ("GLOO_SOCKET_IFNAME", "eth", ["eth"]),  # gloo takes exact names only
        ("GLOO_SOCKET_IFNAME", "eth0,ib0", []),
    ],
)
def test_what_names_no_interface_here(variable: str, value: str, missing: list[str]) -> None:
    assert missing_interfaces(variable, value, HERE) == missing
