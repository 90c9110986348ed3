"""What NCCL_DEBUG=INFO output says: version, network, transports per process, and findings.

NCCL debug lines look like ``host:pid:tid [cudaDev] NCCL INFO message``; warnings carry the
source location: ``host:pid:tid [cudaDev] file.cc:123 NCCL WARN message``. Either may sit
behind a launcher's rank prefix. A process is keyed by its rank prefix when there is one,
else by ``host:pid``; ``comm ... rank R nranks N`` lines tell the NCCL rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.logs.labels import fold_labels, label_text
from rankscope.logs.prefixes import PLAIN, SourceLabels, split_line
from rankscope.logs.sources import ReadSummary
from rankscope.model import Member
from rankscope.serial import SKIP

_LINE = re.compile(
    rb"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>[^\]]*)\] "
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
_CHANNEL = re.compile(r"Channel \S+ : .* via (\S+)")
_COMM_RANK = re.compile(r"\brank (\d+) nranks (\d+)\b")
_IB_COMPLETION = re.compile(r"Got completion from peer (\S+) with (?:status|error) (\d+).*?vendor err (\d+)")
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")

#: ibv_wc_status values NCCL reports, with what they mean and what to do next.
IB_STATUS = {
    "12": (
        "IBV_WC_RETRY_EXC_ERR: transport retries exceeded — the peer never answered over InfiniBand/RoCE",
        "the nodes' IB fabric is not connected to each other (typical in clouds when nodes were not "
        "provisioned together): allocate them in one placement group/availability set/cluster, or check the "
        "GID index (NCCL_IB_GID_INDEX, RoCE) and that ibv_rc_pingpong works between the two nodes",
    ),
    "4": (
        "IBV_WC_LOC_PROT_ERR: local protection error — a memory registration is not valid",
        "check GPUDirect RDMA (nvidia-peermem loaded?), try NCCL_NET_GDR_LEVEL=LOC to rule it out, "
        "and check the locked-memory limit (ulimit -l unlimited)",
    ),
    "5": (
        "IBV_WC_WR_FLUSH_ERR: work request flushed — the queue pair was already in an error state",
        "a consequence, not the cause: look for the first completion error (another status) on this "
        "or the peer rank",
    ),
    "13": (
        "IBV_WC_RNR_RETRY_EXC_ERR: receiver not ready, retries exceeded",
        "the peer stopped posting receives (crashed or hung): look at the peer rank's log",
    ),
}


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
    #: The rank label of its lines, as read; None when they had no prefix.
    label: Optional[bytes] = field(default=None, metadata=SKIP)

    @property
    def member(self) -> Member:
        return Member(self.host, self.pid, self.rank)

    def update_who(self) -> None:
        """Set ``who`` from what is known now (call again when the rank becomes known)."""
        if self.label is not None:
            self.who = self.label.decode("utf-8", "replace")
        elif self.rank is not None:
            self.who = self.member.label
        else:
            self.who = f"{self.host} pid {self.pid}"


@dataclass
class NcclFinding:
    """Something NCCL's output says is wrong (or suspicious), with the next step."""

    kind: str
    message: str
    next_step: str
    who: list[str] = field(default_factory=list)
    example: str = ""


@dataclass
class NcclDocument:
    """``rankscope.logs.nccl``: every process with NCCL output, and the findings."""

    SCHEMA: ClassVar[str] = "rankscope.logs.nccl/1"

    nccl_lines: int
    ranks: list[NcclProcess]
    findings: list[NcclFinding]
    read: ReadSummary = field(default_factory=ReadSummary)


@dataclass
class _Warn:
    who: dict[str, None] = field(default_factory=dict)
    example: str = ""
    count: int = 0


class NcclScan:
    def __init__(self) -> None:
        self.processes: dict[str, NcclProcess] = {}
        self.warns: dict[str, _Warn] = {}
        self.completions: dict[str, _Warn] = {}
        self.system_errors = _Warn()
        self.nccl_lines = 0

    def feed(self, chunk: bytes, labels: SourceLabels = PLAIN) -> None:
        pos = chunk.find(b"NCCL")
        while pos >= 0:
            start = chunk.rfind(b"\n", 0, pos) + 1
            end = chunk.find(b"\n", pos)
            end = len(chunk) if end < 0 else end
            self._line(chunk[start:end], labels)
            pos = chunk.find(b"NCCL", end)

    def _line(self, line: bytes, labels: SourceLabels) -> None:
        split = split_line(line, labels.allow_srun)
        label = labels.label(split.label)
        if b"unhandled system error" in split.text or b"ncclSystemError" in split.text:
            self.system_errors.count += 1
            self.system_errors.who.setdefault(label_text(label) or "?", None)
            self.system_errors.example = (
                self.system_errors.example or split.text.decode("utf-8", "replace")[:300]
            )
        match = _LINE.search(split.text)
        if match is None:
            return
        self.nccl_lines += 1
        host = match.group("host").decode("utf-8", "replace")
        pid = int(match.group("pid"))
        key = label.decode("utf-8", "replace") if label is not None else f"{host}:{pid}"
        proc = self.processes.get(key)
        if proc is None:
            proc = self.processes[key] = NcclProcess("", host, pid, label=label)
            proc.update_who()
        msg = match.group("msg").decode("utf-8", "replace").rstrip("\r")
        if match.group("level") in (b"WARN", b"ABORT"):
            proc.warnings += 1
            self._warn(proc, msg)
            return
        self._info(proc, msg)

    def _warn(self, proc: NcclProcess, msg: str) -> None:
        completion = _IB_COMPLETION.search(msg)
        if completion is not None:
            status = completion.group(2)
            entry = self.completions.setdefault(status, _Warn())
        else:
            text = msg.split(" NCCL WARN ", 1)[-1]
            entry = self.warns.setdefault(_NUMBERS.sub("<n>", text), _Warn())
        entry.count += 1
        entry.who.setdefault(proc.who, None)
        entry.example = entry.example or msg

    def _info(self, proc: NcclProcess, msg: str) -> None:
        if proc.version is None:
            version = _VERSION.search(msg)
            if version is not None:
                proc.version = version.group(1)
                return
        ib = _IB_USING.search(msg)
        if ib is not None:
            proc.ib_devices = _DEVICE.findall(ib.group(1))
            proc.ib_links = _LINK.findall(ib.group(1))
            if ib.group(2):
                proc.oob_interface = ib.group(2).split(":", 1)[0]
            proc.network = proc.network or "IB"
            return
        sock = _SOCKET_USING.search(msg)
        if sock is not None:
            proc.socket_interfaces = _DEVICE.findall(sock.group(1))
            return
        if "NET/IB" in msg and "No device found" in msg:
            proc.ib_devices = []
        boot = _BOOTSTRAP.search(msg)
        if boot is not None:
            proc.bootstrap_interface = boot.group(1).split(":", 1)[0]
            return
        net = _USING_NETWORK.search(msg)
        if net is not None:
            proc.network = net.group(1)
            return
        channel = _CHANNEL.search(msg)
        if channel is not None:
            via = channel.group(1)
            parts = via.split("/")
            transport = parts[0] if parts[0] != "NET" else "/".join(parts[:2])
            proc.transports[transport] = proc.transports.get(transport, 0) + 1
            if parts[0] == "NET" and len(parts) > 1 and proc.network is None:
                proc.network = parts[1]
            return
        comm = _COMM_RANK.search(msg)
        if comm is not None and proc.rank is None:
            proc.rank, proc.nranks = int(comm.group(1)), int(comm.group(2))
            proc.update_who()

    def result(self) -> NcclDocument:
        ordered = sorted(
            self.processes.items(),
            key=lambda item: (item[1].rank if item[1].rank is not None else 1 << 30, item[0]),
        )
        procs = [proc for _key, proc in ordered]
        return NcclDocument(self.nccl_lines, procs, self._findings(procs))

    def _findings(self, procs: list[NcclProcess]) -> list[NcclFinding]:
        findings: list[NcclFinding] = []
        for status, entry in sorted(self.completions.items()):
            meaning, step = IB_STATUS.get(
                status, (f"InfiniBand completion error status {status}", "check the IB link with ibv_devinfo")
            )
            findings.append(
                NcclFinding(f"ib_completion_{status}", meaning, step, list(entry.who), entry.example)
            )
        if self.system_errors.count:
            findings.append(
                NcclFinding(
                    "unhandled_system_error",
                    "NCCL 'unhandled system error': a system call or library (socket, IB verbs, CUDA) failed",
                    "the NCCL WARN lines just before it name the failing call; rerun with NCCL_DEBUG=INFO "
                    "NCCL_DEBUG_SUBSYS=INIT,NET and check /dev/shm size (docker --shm-size) and the "
                    "network interface",
                    list(self.system_errors.who),
                    self.system_errors.example,
                )
            )
        hosts = {p.host for p in procs}
        sockets = [p for p in procs if p.network == "Socket"]
        if sockets:
            where = "between nodes" if len(hosts) > 1 else "on a single node"
            ib_elsewhere = [p for p in procs if p.network == "IB"]
            message = f"{len(sockets)} process(es) send NCCL traffic over TCP sockets (NET/Socket) {where}"
            if ib_elsewhere:
                message += f" while {len(ib_elsewhere)} use InfiniBand/RoCE"
            findings.append(
                NcclFinding(
                    "socket_fallback",
                    message,
                    "if these nodes have InfiniBand/RoCE, NCCL did not find or was told not to use it: check "
                    "NCCL_IB_DISABLE, NCCL_NET, ibv_devinfo, and that the container sees /dev/infiniband; "
                    "sockets are many times slower",
                    [p.who for p in sockets],
                )
            )
        interfaces: dict[str, list[str]] = {}
        for p in procs:
            name = ",".join(p.socket_interfaces) or p.oob_interface or p.bootstrap_interface
            if name:
                interfaces.setdefault(name, []).append(p.who)
        if len(interfaces) > 1:
            summary = "; ".join(f"{name}: {_fold(who)}" for name, who in sorted(interfaces.items()))
            findings.append(
                NcclFinding(
                    "interface_mismatch",
                    f"ranks chose different network interfaces ({summary})",
                    "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface that connects "
                    "the nodes, the same on every node",
                    [w for who in interfaces.values() for w in who],
                )
            )
        versions = {p.version for p in procs if p.version}
        if len(versions) > 1:
            findings.append(
                NcclFinding(
                    "version_mismatch",
                    f"different NCCL versions across ranks: {', '.join(sorted(versions))}",
                    "install the same torch/NCCL build on every node",
                    [p.who for p in procs if p.version],
                )
            )
        for text, entry in sorted(self.warns.items(), key=lambda item: -item[1].count):
            findings.append(
                NcclFinding(
                    "warn",
                    f"NCCL WARN ({entry.count}x): {text}",
                    _warn_hint(text),
                    list(entry.who),
                    entry.example,
                )
            )
        return findings


def _warn_hint(text: str) -> str:
    lowered = text.lower()
    if "timeout" in lowered or "timed out" in lowered:
        return (
            "a peer did not answer in time: find the missing rank (rankscope stacks) or the blocked network"
        )
    if "connect" in lowered:
        return (
            "check that the chosen interface routes between the nodes and that no firewall blocks the ports"
        )
    if "shm" in lowered or "/dev/shm" in lowered:
        return "the shared-memory segment is too small: raise /dev/shm (docker --shm-size=1g or more)"
    return "see the NCCL troubleshooting guide for this message; the lines before it show the context"


def _fold(who: list[str]) -> str:
    return (
        fold_labels([w.encode() for w in who])
        if all(":" in w and " " not in w for w in who)
        else ", ".join(who)
    )


def render_nccl(result: NcclDocument, notes: list[str]) -> str:
    out = [f"{len(result.ranks)} process(es) with NCCL output ({result.nccl_lines} NCCL lines)"]
    for p in result.ranks:
        transports = ", ".join(f"{k}x{v}" for k, v in sorted(p.transports.items())) or "-"
        net = p.network or "?"
        links = p.ib_links if len(p.ib_links) == len(p.ib_devices) else [""] * len(p.ib_devices)
        devices = ",".join(f"{d}/{link}" if link else d for d, link in zip(p.ib_devices, links))
        ifaces = ",".join(p.socket_interfaces) or p.oob_interface or p.bootstrap_interface or "-"
        detail = f"IB {devices} OOB {p.oob_interface or '-'}" if net == "IB" else f"if {ifaces}"
        out.append(
            f"  {p.who:>20}  NCCL {p.version or '?':<14} net {net:<7} {detail:<28} channels {transports}"
            + (f"  WARN x{p.warnings}" if p.warnings else "")
        )
    if result.findings:
        out.append("")
        out.append(f"{len(result.findings)} finding(s):")
        for index, f in enumerate(result.findings, 1):
            out.append(f"[{index}] {f.message}")
            if f.who:
                out.append(f"    where: {', '.join(f.who[:16])}" + (" ..." if len(f.who) > 16 else ""))
            if f.example:
                out.append(f"    e.g.:  {f.example[:200]}")
            out.append(f"    next:  {f.next_step}")
    else:
        out.append("no findings: no warnings, one network, same interface and version everywhere")
    out.extend(f"note: {n}" for n in notes)
    return "\n".join(out)
