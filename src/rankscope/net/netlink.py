"""Addresses and link kinds straight from the kernel (rtnetlink), no `ip` and no subprocess.

One request per dump (RTM_GETADDR, RTM_GETLINK) on an AF_NETLINK socket with a receive timeout;
the answer describes the network namespace this process runs in, like `ip -j addr` would.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

_NLMSG_HDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_RTATTR = struct.Struct("=HH")  # length, type
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, interface index
_IFINFOMSG = struct.Struct("=BxHiII")  # family, device type, index, flags, change

NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_GETLINK, RTM_GETADDR = 18, 22
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFA_ADDRESS, IFA_LOCAL = 1, 2
IFLA_IFNAME, IFLA_LINKINFO, IFLA_INFO_KIND = 3, 18, 1
_SCOPES = {0: "global", 200: "site", 253: "link", 254: "host"}


@dataclass(frozen=True)
class KernelAddress:
    index: int
    family: int  # 4 or 6
    address: str
    prefixlen: int
    scope: str


def _attributes(data: bytes, offset: int, end: int) -> Iterator[tuple[int, bytes]]:
    while offset + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size:
            return
        yield kind & 0x3FFF, data[offset + _RTATTR.size : offset + length]
        offset += (length + 3) & ~3


def _dump(request_type: int, body: bytes, timeout: float) -> Iterator[tuple[int, bytes]]:
    """Every message of one dump: (message type, payload)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.settimeout(timeout)
        sock.bind((0, 0))
        header = _NLMSG_HDR.pack(_NLMSG_HDR.size + len(body), request_type, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
        sock.send(header + body)
        while True:
            chunk = sock.recv(1 << 16)
            offset = 0
            while offset + _NLMSG_HDR.size <= len(chunk):
                length, kind, _flags, _seq, _pid = _NLMSG_HDR.unpack_from(chunk, offset)
                if kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    raise OSError("netlink answered with an error")
                yield kind, chunk[offset + _NLMSG_HDR.size : offset + length]
                offset += (length + 3) & ~3
            if not chunk:
                return


def addresses(timeout: float = 2.0) -> list[KernelAddress]:
    """Every IPv4 and IPv6 address of every interface in this network namespace."""
    found = []
    for _kind, payload in _dump(RTM_GETADDR, _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0), timeout):
        family, prefixlen, _flags, scope, index = _IFADDRMSG.unpack_from(payload)
        attrs = dict(_attributes(payload, _IFADDRMSG.size, len(payload)))
        # IPv4: IFA_LOCAL is this side's address (IFA_ADDRESS is the peer's on a point-to-point link).
        raw = attrs.get(IFA_LOCAL) or attrs.get(IFA_ADDRESS)
        if raw is None or family not in (socket.AF_INET, socket.AF_INET6):
            continue
        found.append(
            KernelAddress(
                index=index,
                family=4 if family == socket.AF_INET else 6,
                address=socket.inet_ntop(family, raw),
                prefixlen=prefixlen,
                scope=_SCOPES.get(scope, str(scope)),
            )
        )
    return found


def link_kinds(timeout: float = 2.0) -> dict[str, str]:
    """Interface name -> its software kind as the kernel names it (veth, bridge, bond, vlan, ifb, ...).

    Physical devices have none and are left out.
    """
    kinds: dict[str, str] = {}
    for _kind, payload in _dump(RTM_GETLINK, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0), timeout):
        attrs = dict(_attributes(payload, _IFINFOMSG.size, len(payload)))
        name = attrs.get(IFLA_IFNAME, b"").rstrip(b"\0").decode(errors="replace")
        info = attrs.get(IFLA_LINKINFO)
        if not name or info is None:
            continue
        nested = dict(_attributes(info, 0, len(info)))
        kind = nested.get(IFLA_INFO_KIND, b"").rstrip(b"\0").decode(errors="replace")
        if kind:
            kinds[name] = kind
    return kinds
