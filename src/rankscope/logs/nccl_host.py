"""What this host has that NCCL could have used: network interfaces and InfiniBand devices.

Read only when the log was written here (its host names this host, or it names none); the rules
take a :class:`HostFacts` so that tests give their own.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostFacts:
    """This host's name (short), its network interfaces, its InfiniBand HCAs and verbs devices."""

    name: str
    interfaces: tuple[str, ...] = ()
    #: HCAs under /sys/class/infiniband (mlx5_0, ...).
    ib_devices: tuple[str, ...] = ()
    #: /dev/infiniband/uverbs* present: a process here can open an HCA (rdma_cm alone is not one).
    has_uverbs: bool = False

    def is_host(self, host: str) -> bool:
        return short_name(host) == short_name(self.name)


def short_name(host: str) -> str:
    return host.split(".", 1)[0]


def read_host_facts(root: Path = Path("/")) -> HostFacts:
    """This host's facts; a part that cannot be read is left empty."""
    try:
        interfaces = tuple(sorted(name for _index, name in socket.if_nameindex()))
    except OSError:
        interfaces = ()
    try:
        ib_devices = tuple(sorted(os.listdir(root / "sys/class/infiniband")))
    except OSError:
        ib_devices = ()
    try:
        has_uverbs = any(name.startswith("uverbs") for name in os.listdir(root / "dev/infiniband"))
    except OSError:
        has_uverbs = False
    return HostFacts(short_name(socket.gethostname()), interfaces, ib_devices, has_uverbs)
