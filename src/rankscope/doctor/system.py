"""The node as the doctor reads it: small injectable readers, so crafted inputs reach every branch.

:class:`System` holds a root directory (``/proc``, ``/sys``, ``/dev`` are read under it), the
environment, and one callable per other kind of question (a tool on PATH, a command's output, a
file system's size, a resource limit, a name lookup, the interface names). ``System.real()`` is
this node; tests build one over a temporary directory with crafted files and values. Nothing here
writes, and every command has a deadline.
"""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from rankscope.nvidia.read import import_nvml

#: Commands the doctor runs (nvidia-smi) get this long.
COMMAND_TIMEOUT = 10.0


def run_command(argv: Sequence[str], timeout: float = COMMAND_TIMEOUT) -> Optional[str]:
    """stdout of ``argv`` (an argv list, no shell), or ``None`` when it fails, is missing or runs too long."""
    from rankscope import lifetime

    return lifetime.output(list(argv), timeout)


def file_system_size(path: str) -> Optional[tuple[int, int]]:
    """(total, available) bytes of the file system holding ``path``; ``None`` when it does not exist."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


def resolve(name: str) -> Optional[list[str]]:
    """The addresses ``name`` resolves to (as glibc, so /etc/hosts first); ``None`` when it does not."""
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return None
    return sorted({str(info[4][0]) for info in infos})


def interface_names() -> list[str]:
    # Names only: the doctor judges *_SOCKET_IFNAME values against them (rankscope.net.ifname);
    # rankscope.net's full listing (addresses, kinds over netlink) is not needed for that.
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


def which(tool: str) -> Optional[str]:
    """A tool next to this interpreter (py-spy and pystack come with pip, into the venv's bin/), else on PATH."""
    from rankscope import lifetime

    return lifetime.tool_path(tool)


@dataclass(frozen=True)
class System:
    root: Path = Path("/")
    env: Mapping[str, str] = field(default_factory=dict)
    which: Callable[[str], Optional[str]] = which
    run: Callable[[Sequence[str]], Optional[str]] = run_command
    fs_size: Callable[[str], Optional[tuple[int, int]]] = file_system_size
    rlimit: Callable[[int], tuple[int, int]] = resource.getrlimit
    hostname: Callable[[], str] = socket.gethostname
    resolve: Callable[[str], Optional[list[str]]] = resolve
    interfaces: Callable[[], list[str]] = interface_names
    euid: Callable[[], int] = os.geteuid
    nvml: Callable[[], Optional[Any]] = import_nvml

    @classmethod
    def real(cls) -> System:
        return cls(env=dict(os.environ))

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def read(self, absolute: str) -> Optional[str]:
        """A small text file under the root, stripped; ``None`` when it is missing or unreadable."""
        try:
            return self.path(absolute).read_text(errors="replace").strip()
        except OSError:
            return None

    def exists(self, absolute: str) -> bool:
        return self.path(absolute).exists()

    def listdir(self, absolute: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(absolute)))
        except OSError:
            return []
