"""Pure: what an open descriptor is, from its /proc link, its fdinfo lines and the socket tables.

/proc/PID/net/{tcp,tcp6,udp,udp6} give each socket inode its local and peer address and its
state; /proc/PID/net/unix gives a unix socket its path (not its peer: the kernel keeps that in
sock_diag, which ss reads over netlink). The tables are the process's own network namespace.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Container, Iterable
from dataclasses import dataclass
from typing import Optional

from rankscope.inspect.report import FdKind, OpenFd

#: The kernel's TCP states (include/net/tcp_states.h), by the hex code in /proc/net/tcp.
TCP_STATES = {
    1: "ESTABLISHED",
    2: "SYN_SENT",
    3: "SYN_RECV",
    4: "FIN_WAIT1",
    5: "FIN_WAIT2",
    6: "TIME_WAIT",
    7: "CLOSE",
    8: "CLOSE_WAIT",
    9: "LAST_ACK",
    10: "LISTEN",
    11: "CLOSING",
}
_UNIX_STATES = {1: "UNCONNECTED", 2: "CONNECTING", 3: "CONNECTED", 4: "DISCONNECTING"}
#: The socket tables read, in this order.
NET_TABLES = ("tcp", "tcp6", "udp", "udp6", "unix")
_V4_MAPPED = bytes(10) + b"\xff\xff"


@dataclass(frozen=True)
class SocketEntry:
    protocol: str
    local: str
    peer: Optional[str]
    state: Optional[str]


def _address(field: str) -> str:
    """``0100007F:1F90`` -> ``127.0.0.1:8080``; IPv6 in brackets (v4-mapped shown as v4)."""
    hex_ip, _, hex_port = field.partition(":")
    port = int(hex_port, 16)
    raw = bytes.fromhex(hex_ip)
    if len(raw) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, raw[::-1])}:{port}"
    # IPv6: four 32-bit words, each in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    if words[:12] == _V4_MAPPED:
        return f"{socket.inet_ntop(socket.AF_INET, words[12:])}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, words)}]:{port}"


def parse_inet_table(
    protocol: str, text: str, wanted: Optional[Container[int]] = None
) -> dict[int, SocketEntry]:
    """inode -> socket, from /proc/net/tcp, tcp6, udp or udp6 (only the ``wanted`` inodes when given).

    A node's table holds every socket of the namespace (thousands on a busy one, TIME_WAIT
    included): only the process's own are decoded.
    """
    sockets: dict[int, SocketEntry] = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            inode = int(fields[9])
            if wanted is not None and inode not in wanted:
                continue
            local, remote, state = _address(fields[1]), _address(fields[2]), int(fields[3], 16)
        except ValueError:
            continue
        unconnected = remote.endswith(":0") and remote.rsplit(":", 1)[0] in ("0.0.0.0", "[::]")
        if protocol.startswith("tcp"):
            state_name: Optional[str] = TCP_STATES.get(state, f"state {state}")
        else:
            state_name = None if unconnected else "CONNECTED"
        sockets[inode] = SocketEntry(protocol, local, None if unconnected else remote, state_name)
    return sockets


def parse_unix_table(text: str, wanted: Optional[Container[int]] = None) -> dict[int, SocketEntry]:
    """inode -> socket, from /proc/net/unix (its path, ``@name`` for an abstract one, ``-`` for none)."""
    sockets: dict[int, SocketEntry] = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 7:
            continue
        try:
            state, inode = int(fields[5], 16), int(fields[6])
        except ValueError:
            continue
        if wanted is not None and inode not in wanted:
            continue
        path = fields[7] if len(fields) > 7 else "-"
        kind = "unix-dgram" if fields[4] == "0002" else "unix"
        sockets[inode] = SocketEntry(kind, path, None, _UNIX_STATES.get(state))
    return sockets


def socket_tables(
    tables: Iterable[tuple[str, str]], wanted: Optional[Container[int]] = None
) -> dict[int, SocketEntry]:
    """inode -> socket from (name, text) of each table in :data:`NET_TABLES` (only ``wanted`` inodes when given)."""
    sockets: dict[int, SocketEntry] = {}
    for name, text in tables:
        sockets.update(
            parse_unix_table(text, wanted) if name == "unix" else parse_inet_table(name, text, wanted)
        )
    return sockets


def inode_of(target: str) -> Optional[int]:
    """``socket:[1234]`` / ``pipe:[99]`` -> the inode."""
    start, end = target.find("[") + 1, target.rfind("]")
    try:
        return int(target[start:end]) if 0 < start <= end else None
    except ValueError:
        return None


def kind_of(target: str) -> FdKind:
    if target.startswith("socket:"):
        return FdKind.SOCKET
    if target.startswith("pipe:"):
        return FdKind.PIPE
    if target.startswith("anon_inode:"):
        name = target[len("anon_inode:") :]
        if name.startswith("[eventfd"):
            return FdKind.EVENTFD
        if name == "[eventpoll]":
            return FdKind.EPOLL
        return FdKind.ANON
    if target.endswith(" (deleted)"):
        return FdKind.DELETED
    if target.startswith("/dev/nvidia"):
        return FdKind.GPU
    if target.startswith("/dev/infiniband/"):
        return FdKind.RDMA
    if target.startswith("/dev/"):
        return FdKind.DEVICE
    if target.startswith("/"):
        return FdKind.FILE
    return FdKind.OTHER


def mode_of(flags: int) -> str:
    """Open flags (octal in fdinfo) in words: r, w, rw, and append / nonblock."""
    access = {0: "r", 1: "w", 2: "rw"}.get(flags & 3, "?")
    extra = [name for bit, name in ((0o2000, "append"), (0o4000, "nonblock")) if flags & bit]
    return ",".join([access, *extra])


def classify(
    fd: int, target: str, fdinfo_lines: list[str], sockets: dict[int, SocketEntry], is_dir: bool = False
) -> OpenFd:
    """One descriptor from its link, its fdinfo lines and the socket tables."""
    kind = FdKind.DIRECTORY if is_dir else kind_of(target)
    info: dict[str, str] = {}
    watches = []
    for line in fdinfo_lines:
        key, _, value = line.partition(":")
        if key == "tfd":
            # "tfd:        5 events:       19 data: ..."
            with contextlib.suppress(IndexError, ValueError):
                watches.append(int(value.split()[0]))
        else:
            info.setdefault(key, value.strip())
    try:
        mode = mode_of(int(info.get("flags", ""), 8))
    except ValueError:
        mode = ""
    offset = None
    if kind in (FdKind.FILE, FdKind.DELETED, FdKind.DEVICE) and info.get("pos", "").isdigit():
        offset = int(info["pos"])
    socket = sockets.get(inode_of(target) or -1) if kind == FdKind.SOCKET else None
    return OpenFd(
        fd=fd,
        kind=kind,
        target=target,
        mode=mode,
        offset=offset,
        protocol=socket.protocol if socket else None,
        local=socket.local if socket else None,
        peer=socket.peer if socket else None,
        state=socket.state if socket else None,
        watches=tuple(sorted(watches)),
    )


def counts_of(fds: Iterable[OpenFd]) -> dict[str, int]:
    """kind -> count, in the order of :class:`FdKind`, kinds with none left out."""
    found = [entry.kind for entry in fds]
    return {str(kind): found.count(kind) for kind in FdKind if kind in found}
