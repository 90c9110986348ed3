"""Reading NCCL_DEBUG=INFO lines: what NCCL chose in each process, and the messages rules look for.

NCCL debug lines look like ``host:pid:tid [cudaDev] NCCL INFO message``; warnings carry the
source location, and since NCCL 2.2x a timestamp: ``[2026-11-22 20:57:31] host:pid:tid [cudaDev]
init.cc:904 NCCL WARN message``. The forms below are those of NCCL 2.28.9 as recorded on an H100
node (tests/data/gpu-h100/), and of NCCL 2.18/2.19 where older lines differ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from rankscope.model import Member
from rankscope.serial import OMIT_NONE, SKIP

LINE = re.compile(
    rb"(?P<host>[^\s:\[\]]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>[^\]]*)\] "
    rb"(?:\S+:\d+ )?NCCL (?P<level>INFO|WARN|ABORT|TRACE) ?(?P<msg>.*)"
)
_VERSION = re.compile(r"NCCL version (\S+)")
_IB_USING = re.compile(r"NET/IB ?: Using (.*?)(?:; OOB (\S+))?$")
_SOCKET_USING = re.compile(r"NET/Socket ?: Using (.*)$")
_BOOTSTRAP = re.compile(r"Bootstrap ?: Using (\S+)")
_USING_NETWORK = re.compile(r"Using network (\S+)")
_DEVICE = re.compile(r"\[\d+\]([^\s:\[\]]+)(?::[^\s\[]*)?")
#: "[1]mlx5_1:1/RoCE": the link layer of each NET/IB device.
_LINK = re.compile(r"\[\d+\][^\s:\[\]]+:\d+/(\w+)")
#: A connection of one channel: "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC".
_CONNECTION = re.compile(r"Channel \S+ : .* via (\S+)")
#: The ring of one channel: "Channel 03/64 : 0" (NCCL 2.28) or "Channel 00/02 :    0   1".
_RING = re.compile(r"Channel (\d+)/(\d+) :\s+(-?\d+(?:\s+-?\d+)*)\s*$")
_TREE = re.compile(r"Trees \[0\] (\S+)")
#: "ncclCommInitRankConfig comm 0x.. rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x.. - Init START"
_COMM = re.compile(
    r"\brank (\d+) nranks (\d+) cudaDev (\d+)(?: nvmlDev \d+)? busId (\S+)(?: commId (\S+))?"
    r"(?: - Init (START|COMPLETE))?"
)
_COMM_RANK = re.compile(r"\brank (\d+) nranks (\d+)\b")
#: "NCCL_SOCKET_IFNAME set by environment to eth0" (ENV) or "NCCL_IB_HCA set to mlx5_9" (NET).
_ENV = re.compile(r"\b((?:NCCL|GLOO)_[A-Z0-9_]+) set (?:by environment )?to (\S+)")


@dataclass
class NcclProcess:
    """One process that wrote NCCL lines, and what NCCL chose there.

    ``who`` names it: its rank label when its lines had a prefix, else NCCL's own ``host:rank``
    (or ``host pid N`` until a ``comm ... rank R`` line tells the rank).
    """

    who: str
    host: str
    pid: int
    rank: Optional[int] = None
    nranks: Optional[int] = None
    version: Optional[str] = None
    network: Optional[str] = None
    ib_devices: list[str] = field(default_factory=list)
    #: Link layer per IB device, aligned with ``ib_devices``: "IB" or "RoCE".
    ib_links: list[str] = field(default_factory=list)
    socket_interfaces: list[str] = field(default_factory=list)
    oob_interface: Optional[str] = None
    bootstrap_interface: Optional[str] = None
    transports: dict[str, int] = field(default_factory=dict)
    warnings: int = 0
    #: How many channels NCCL built (the N of ``Channel 00/N : ...``); None before the rings are set.
    channels: Optional[int] = field(default=None, metadata=OMIT_NONE)
    #: The ring of channel 0 (``0 1 2 3``) and its tree (``-1/-1/-1->0->1``) as NCCL printed them.
    ring: Optional[str] = field(default=None, metadata=OMIT_NONE)
    tree: Optional[str] = field(default=None, metadata=OMIT_NONE)
    cuda_dev: Optional[int] = field(default=None, metadata=OMIT_NONE)
    bus_id: Optional[str] = field(default=None, metadata=OMIT_NONE)
    comm_id: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: "START" after ``Init START``, "COMPLETE" after ``Init COMPLETE`` (of its first communicator).
    init: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: NCCL_*/GLOO_* variables NCCL said were set (``... set by environment to ...``).
    env: dict[str, str] = field(default_factory=dict)
    #: The rank label of its lines, as read; None when they had no prefix.
    label: Optional[bytes] = field(default=None, metadata=SKIP)
    #: The first line that told each fact (see :meth:`read_info`), as evidence for findings.
    facts_at: dict[str, NcclEvidence] = field(default_factory=dict, metadata=SKIP)

    @property
    def member(self) -> Member:
        return Member(self.host, self.pid, self.rank)

    @property
    def interface(self) -> Optional[str]:
        """The interface its NCCL traffic or bootstrap goes through, as NCCL named it."""
        return ",".join(self.socket_interfaces) or self.oob_interface or self.bootstrap_interface

    def update_who(self) -> None:
        """Set ``who`` from what is known now (call again when the rank becomes known)."""
        if self.label is not None:
            self.who = self.label.decode("utf-8", "replace")
        elif self.rank is not None:
            self.who = self.member.label
        else:
            self.who = f"{self.host} pid {self.pid}"

    def read_info(self, msg: str) -> Optional[str]:
        """Take what one ``NCCL INFO`` message says about this process.

        Returns the fact it told, for the caller to keep the line as evidence: ``version``,
        ``network``, ``interface``, ``comm`` (rank, GPU, communicator); None for the others.
        """
        if self.version is None:
            version = _VERSION.search(msg)
            if version is not None:
                self.version = version.group(1)
                return "version"
        if msg.startswith("Channel "):
            self._read_channel(msg)
            return None
        if msg.startswith("Trees "):
            tree = _TREE.search(msg)
            if tree is not None and self.tree is None:
                self.tree = tree.group(1)
            return None
        ib = _IB_USING.search(msg)
        if ib is not None:
            self.ib_devices = _DEVICE.findall(ib.group(1))
            self.ib_links = _LINK.findall(ib.group(1))
            if ib.group(2):
                self.oob_interface = ib.group(2).split(":", 1)[0]
            if self.ib_devices and self.network is None:
                self.network = "IB"
                return "network"
            return "interface" if ib.group(2) else None
        sock = _SOCKET_USING.search(msg)
        if sock is not None:
            self.socket_interfaces = _DEVICE.findall(sock.group(1))
            return "interface"
        boot = _BOOTSTRAP.search(msg)
        if boot is not None:
            self.bootstrap_interface = boot.group(1).split(":", 1)[0]
            return "interface"
        net = _USING_NETWORK.search(msg)
        if net is not None:
            self.network = net.group(1)
            return "network"
        env = _ENV.search(msg)
        if env is not None:
            self.env.setdefault(env.group(1), env.group(2))
            return None
        return "comm" if self._read_comm(msg) else None

    def _read_channel(self, msg: str) -> None:
        connection = _CONNECTION.search(msg)
        if connection is not None:
            parts = connection.group(1).split("/")
            transport = parts[0] if parts[0] != "NET" else "/".join(parts[:2])
            self.transports[transport] = self.transports.get(transport, 0) + 1
            if parts[0] == "NET" and len(parts) > 1 and self.network is None:
                self.network = parts[1]
            return
        ring = _RING.search(msg)
        if ring is not None and self.init != "COMPLETE":
            self.channels = max(self.channels or 0, int(ring.group(2)))
            if int(ring.group(1)) == 0 and self.ring is None:
                self.ring = " ".join(ring.group(3).split())

    def _read_comm(self, msg: str) -> bool:
        """Read a ``comm ... rank R nranks N cudaDev D busId B`` line; True when it told the rank and GPU."""
        comm = _COMM.search(msg)
        if comm is not None:
            if self.rank is None or (self.comm_id is not None and comm.group(5) == self.comm_id):
                self.rank, self.nranks = int(comm.group(1)), int(comm.group(2))
                self.cuda_dev, self.bus_id = int(comm.group(3)), comm.group(4)
                self.comm_id = comm.group(5) or self.comm_id
                if comm.group(6) and self.init != "COMPLETE":
                    self.init = comm.group(6)
                self.update_who()
                return True
            return False
        short = _COMM_RANK.search(msg)
        if short is not None and self.rank is None:
            self.rank, self.nranks = int(short.group(1)), int(short.group(2))
            self.update_who()
        return False


@dataclass
class NcclEvidence:
    """One line that shows a finding: where it is (``file:line``) and what it says."""

    at: str
    line: str


@dataclass(frozen=True)
class Signal:
    """A message a rule looks for: its name, a pattern on the line's text (prefix removed), and
    words of which one is in every line it matches (a substring test is 10x cheaper than a search).
    """

    name: str
    pattern: re.Pattern[str]
    needles: tuple[str, ...]

    def search(self, text: str) -> Optional[re.Match[str]]:
        if not any(needle in text for needle in self.needles):
            return None
        return self.pattern.search(text)


#: Messages read from any line that contains ``NCCL`` (or gloo's own wording), warning or not.
#: Each is quoted from NCCL's or torch's source or from a real log; docs/logs.md says where.
SIGNALS = (
    Signal(
        "duplicate_gpu",
        re.compile(r"Duplicate GPU detected : rank (\d+) and rank (\d+) both on CUDA device (\S+)"),
        ("Duplicate GPU",),
    ),
    Signal(
        "no_socket_interface",
        re.compile(
            r"Bootstrap ?: no socket interface found|NET/Socket ?: no interface found"
            r"|NET/Socket ?: No usable listening interface found"
        ),
        ("interface found",),
    ),
    Signal("ib_no_device", re.compile(r"NET/IB ?: No device found"), ("No device found",)),
    Signal(
        "gloo_no_interface", re.compile(r"Unable to find address for: (\S+)"), ("Unable to find address",)
    ),
    Signal(
        "shm_segment",
        re.compile(
            r"Error while creating shared memory segment (\S+) \(size (\d+)\)"
            r"|Error: failed to extend (\S+) to (\d+) bytes"
        ),
        ("shared memory segment", "failed to extend"),
    ),
    Signal(
        "connect_refused",
        re.compile(
            r"Call to connect returned Connection refused|Connect to (\S+) failed : Connection refused"
        ),
        ("Connection refused",),
    ),
    Signal("connect_failed", re.compile(r"Connect to (\S+) failed : (.+)$"), ("Connect to",)),
    Signal(
        "remote_error",
        re.compile(
            r"remote process exited or there was a network error|Connection closed by remote peer"
            r"|failed : Broken pipe"
        ),
        ("remote process exited", "closed by remote peer", "Broken pipe"),
    ),
    Signal("cuda_oom", re.compile(r"Cuda failure (?:\d+ )?'out of memory'"), ("out of memory",)),
    Signal(
        "cuda_init_error",
        re.compile(r"Cuda failure (?:\d+ )?'initialization error'"),
        ("initialization error",),
    ),
    Signal(
        "cuda_invalid_argument",
        re.compile(r"Cuda failure (?:\d+ )?'invalid argument'"),
        ("invalid argument",),
    ),
    Signal(
        "cuda_failure",
        re.compile(
            r"Cuda failure (?:(\d+) )?'(?!peer access|out of memory|initialization error|invalid argument)([^']*)'"
        ),
        ("Cuda failure",),
    ),
    Signal("no_algorithm", re.compile(r"no algorithm/protocol available"), ("no algorithm",)),
    Signal("net_ofi_error", re.compile(r"NET/OFI .*(?:[Ee]rror|failed)"), ("NET/OFI",)),
    Signal(
        "ib_verbs_failed",
        re.compile(
            r"\b(ibv_(?:create_qp|modify_qp|reg_mr|reg_dmabuf_mr|create_cq|alloc_pd|open_device)\w*)\b.*?failed"
        ),
        ("ibv_",),
    ),
    Signal(
        "watchdog_timeout",
        re.compile(
            r"Watchdog caught collective operation timeout: WorkNCCL\((.*?)\)"
            r"(?: ran for (\d+) milliseconds before timing out)?"
        ),
        ("Watchdog caught",),
    ),
    Signal(
        "p2p_unsupported",
        re.compile(r"(?:Cuda failure (\d+) )?'?peer access is not supported between these two devices"),
        ("peer access is not supported",),
    ),
    Signal(
        "system_error",
        re.compile(r"unhandled system error|ncclSystemError"),
        ("system error", "ncclSystemError"),
    ),
    Signal(
        "ib_completion",
        re.compile(r"Got completion from peer (\S+) with (?:status|error)[ =](\d+).*?vendor err (\d+)"),
        ("Got completion",),
    ),
)

#: The signals an ``NCCL INFO`` line can carry; the others come from WARN lines or torch's own.
INFO_SIGNALS = tuple(s for s in SIGNALS if s.name in ("ib_no_device", "connect_refused"))
