"""Known NCCL (and gloo) failures: what each rule looks for, its cause and its fix, next to the rule.

Pure: the processes and matched messages of :mod:`rankscope.logs.nccl` in, findings out. The
messages are quoted from NCCL's source and real logs (docs/logs.md lists them with their origin).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Optional

from rankscope.folding import RankSet
from rankscope.logs.labels import fold_labels
from rankscope.logs.nccl_host import HostFacts
from rankscope.logs.nccl_lines import NcclEvidence, NcclProcess

#: Evidence lines kept per finding (the count of all of them is in the message).
EVIDENCE = 8


@dataclass(frozen=True)
class Rule:
    """One known failure: its id (the finding's ``kind``), what it looks for, its cause and fix."""

    id: str
    looks_for: str
    cause: str
    fix: str


RULES = {
    rule.id: rule
    for rule in (
        Rule(
            "interface_not_found",
            "`Bootstrap : no socket interface found`, `NET/Socket : no interface found` (NCCL_SOCKET_IFNAME); "
            "`NCCL_IB_HCA set to X` then `NET/IB : No device found.`; gloo's `Unable to find address for: X` "
            "(GLOO_SOCKET_IFNAME)",
            "{var} names the interfaces to use (a comma list of name prefixes; ^ excludes, = matches "
            "exactly) and none that exists on the node matches it, so the process group cannot start",
            "set {var} to an interface that exists on every node and connects them (`ip -o addr` shows "
            "them; the same name everywhere), or unset it and let NCCL/gloo pick one",
        ),
        Rule(
            "duplicate_gpu",
            "`Duplicate GPU detected : rank A and rank B both on CUDA device X`, or two ranks of one "
            "communicator on one host with the same busId",
            "two ranks of one communicator opened the same GPU: every rank uses cuda:0 (no "
            "torch.cuda.set_device), CUDA_VISIBLE_DEVICES is the same for all ranks, or a node starts "
            "more ranks than it has GPUs",
            "make each rank pick its own device before init_process_group: "
            "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) (or device_id=torch.device('cuda', "
            "local_rank)); start at most one rank per GPU on each node (--nproc-per-node)",
        ),
        Rule(
            "version_mismatch",
            "`NCCL version X` differs between ranks",
            "ranks run different NCCL builds (different torch wheels, containers or NCCL libraries per "
            "node); NCCL does not promise that they can talk to each other, and init can hang or fail",
            "run the same torch/NCCL build on every node (one container image, one venv); "
            "`python -c 'import torch; print(torch.cuda.nccl.version())'` shows a node's version",
        ),
        Rule(
            "ib_unused",
            "`Using network Socket` in a process while InfiniBand devices are listed (`NET/IB : Using "
            "[0]mlx5_0:1/IB` in the log) or this host has /dev/infiniband/uverbs*",
            "NCCL found InfiniBand but sends over TCP sockets: it was told not to use IB (NCCL_IB_DISABLE=1, "
            "NCCL_NET=Socket, an NCCL_IB_HCA that matches nothing) or this process cannot open the HCA "
            "(a container without /dev/infiniband, no IPC_LOCK, no rdma-core); sockets are many times slower",
            "unset NCCL_IB_DISABLE / NCCL_NET, check NCCL_IB_HCA against `ibv_devinfo`, and give containers "
            "the devices (--device=/dev/infiniband --cap-add=IPC_LOCK, or the RDMA device plugin)",
        ),
        Rule(
            "socket_fallback",
            "`NET/Socket` used between nodes, or while other ranks use IB",
            "NCCL traffic between nodes goes over TCP sockets: no InfiniBand/RoCE was found or it is "
            "turned off; sockets are many times slower",
            "if these nodes have InfiniBand/RoCE, check NCCL_IB_DISABLE, NCCL_NET, `ibv_devinfo`, and "
            "that the container sees /dev/infiniband",
        ),
        Rule(
            "interface_mismatch",
            "ranks chose different socket/OOB/bootstrap interfaces",
            "NCCL picks an interface per node on its own (ib*, then anything but docker/lo); nodes whose "
            "first interface differs, or a docker bridge, end up on networks that may not reach each other",
            "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface that connects the nodes, "
            "the same on every node",
        ),
        Rule(
            "shm_too_small",
            "`Error while creating shared memory segment /dev/shm/nccl-X (size N)`, "
            "`Error: failed to extend /dev/shm/nccl-X to N bytes`",
            "/dev/shm is too small or full: NCCL's shared-memory transport needs a segment per pair of "
            "ranks on a node, and containers get 64 MB by default; stale /dev/shm/nccl-* files of killed "
            "jobs also fill it",
            "give the job more shared memory (docker --shm-size=8g or --ipc=host; Kubernetes: an emptyDir "
            "with medium: Memory on /dev/shm), remove stale /dev/shm/nccl-*; NCCL_SHM_DISABLE=1 works "
            "around it at a speed cost",
        ),
        Rule(
            "connection_refused",
            "`Call to connect returned Connection refused`, `Connect to ADDR failed : Connection refused`",
            "the peer's address answered but nothing listened on that port: the peer process was not up "
            "yet or had died, or the address belongs to an interface the peer does not listen on",
            "check that every rank started and reached init (`rankscope logs errors`), that "
            "NCCL_SOCKET_IFNAME selects an interface the nodes reach each other on, and that no "
            "firewall rejects the ports between them",
        ),
        Rule(
            "connect_failed",
            "`Connect to ADDR failed : REASON` (timed out, no route to host, ...)",
            "packets to the peer's address get no answer or no route: a firewall drops them, or the "
            "address is on an interface that does not connect the nodes (docker0, a private NAT address)",
            "check that the interface each rank chose (the `interface` column) routes between the nodes "
            "(`ping`/`nc` to that address from the other node), set NCCL_SOCKET_IFNAME to it, open the "
            "ports between the nodes",
        ),
        Rule(
            "p2p_unsupported",
            "`Cuda failure 217 'peer access is not supported between these two devices'` (NCCL's P2P or "
            "SHM transport setting up CUDA peer access or IPC)",
            "CUDA refused direct access between two GPUs of a node: they have no peer-to-peer path (PCIe "
            "GPUs without P2P support, some cloud instances, ACS/IOMMU on), or each process sees only its "
            "own GPU (one CUDA_VISIBLE_DEVICES per process), so CUDA IPC between them cannot work",
            "let every process of a node see all its GPUs and pick its own with "
            "torch.cuda.set_device(LOCAL_RANK) rather than one CUDA_VISIBLE_DEVICES each; where the GPUs "
            "really have no P2P, NCCL_P2P_DISABLE=1 (NCCL then goes through host memory); on a PCIe-only "
            "node with NCCL 2.2x, NCCL_CUMEM_HOST_ENABLE=0 or a newer driver (NVIDIA/nccl issue 1838)",
        ),
        Rule(
            "remote_error",
            "`remote process exited or there was a network error` (ncclRemoteError), "
            "`Connection closed by remote peer`, `Call to send to ADDR failed : Broken pipe`",
            "a peer process exited or the network between them failed; these ranks are victims of it",
            "find the rank that failed first (`rankscope logs errors`) and fix that; if no rank failed, "
            "check the link between the nodes",
        ),
        Rule(
            "cuda_oom",
            "`Cuda failure 'out of memory'` in an NCCL WARN (alloc.h, enqueue.cc)",
            "this process's GPU had no memory left when NCCL allocated its buffers or launched a kernel: "
            "this rank failed, the ranks that then lost it are victims",
            "free GPU memory on this rank (smaller batch, activation checkpointing, "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), or give NCCL less (NCCL_BUFFSIZE, fewer "
            "channels: NCCL_MAX_NCHANNELS); check that no other process shares the GPU (`nvidia-smi`)",
        ),
        Rule(
            "cuda_init_error",
            "`Cuda failure 'initialization error'`",
            "CUDA could not start in this process: CUDA was used before fork (a forked worker of a "
            "process that already initialised CUDA), a driver/library mismatch, or no GPU visible",
            "start workers with the spawn start method (torch.multiprocessing.set_start_method('spawn')), "
            "do not touch CUDA before fork; check `nvidia-smi` and that the driver supports this CUDA",
        ),
        Rule(
            "cuda_invalid_argument",
            "`Cuda failure 1 'invalid argument'`",
            "a CUDA call NCCL made was refused as invalid: usually memory registration or IPC between "
            "processes that see different GPUs, or an NCCL build that does not match the driver",
            "let every process see the same GPUs and select its own (set_device(LOCAL_RANK)); try "
            "NCCL_CUMEM_ENABLE=0 or NCCL_P2P_DISABLE=1 to confirm, and run one NCCL build everywhere",
        ),
        Rule(
            "cuda_failure",
            "any other `Cuda failure N 'message'` in an NCCL WARN",
            "a CUDA call of this process failed inside NCCL: this rank failed, the ranks that lost it "
            "are victims",
            "the CUDA message names the failure; rerun this rank with CUDA_LAUNCH_BLOCKING=1 and "
            "`compute-sanitizer` if it is a kernel fault",
        ),
        Rule(
            "no_algorithm",
            "`no algorithm/protocol available` (`Error : no algorithm/protocol available for function ...`)",
            "NCCL_ALGO / NCCL_PROTO force an algorithm or protocol that this collective, data type or "
            "topology cannot use (NVLS without NVLink SHARP, CollNet without the plugin, a protocol "
            "excluded for this operation)",
            "unset NCCL_ALGO and NCCL_PROTO (or allow more: NCCL_ALGO=Ring,Tree), then set them again "
            "only with the values `NCCL_DEBUG=INFO` shows as possible",
        ),
        Rule(
            "ib_verbs_failed",
            "`Call to ibv_create_qp failed`, `ibv_reg_mr ... failed`, `ibv_modify_qp failed` (NET/IB, "
            "while NCCL connects the ranks over InfiniBand or RoCE)",
            "an InfiniBand verbs call of this rank failed: most often the locked-memory limit (`ulimit -l`) "
            "is too low for the queue pairs and registered buffers (a container's default), the process "
            "cannot open the HCA (`/dev/infiniband` not given to the container), or, for ibv_reg_mr of "
            "GPU memory, GPUDirect RDMA is not available (the nvidia-peermem module not loaded)",
            "raise the locked-memory limit in the job's environment (`ulimit -l unlimited`; docker "
            "`--ulimit memlock=-1 --cap-add IPC_LOCK --device /dev/infiniband`) and check `ibv_devinfo` "
            "there; for a failed ibv_reg_mr of GPU buffers load nvidia-peermem, or set "
            "NCCL_NET_GDR_LEVEL=LOC to keep GPU memory off the NIC; NCCL_IB_DISABLE=1 falls back to "
            "sockets, slower",
        ),
        Rule(
            "net_ofi_error",
            "a `NET/OFI` error in an NCCL WARN (the aws-ofi-nccl plugin, EFA and other libfabric networks)",
            "the libfabric network under NCCL failed a request: an EFA/libfabric problem on this node, "
            "a peer that died, or a plugin that does not match NCCL or the libfabric version",
            "check the node's EFA devices (`fi_info -p efa`), the plugin and libfabric versions against "
            "NCCL's, and whether a peer died first (`rankscope logs errors`)",
        ),
        Rule(
            "watchdog_timeout",
            "torch's `Watchdog caught collective operation timeout: WorkNCCL(...)`",
            "a collective did not finish within the process group's timeout: some rank never called it "
            "(stuck elsewhere, crashed, or called a different collective or shape), or the network stalled",
            "see what the other ranks were doing while it hung (`rankscope stacks`; torch's flight "
            "recorder, TORCH_NCCL_TRACE_BUFFER_SIZE); a rank with a lower SeqNum, or none, is the laggard",
        ),
        Rule(
            "unhandled_system_error",
            "`unhandled system error` / `ncclSystemError` anywhere in the log",
            "a system call or library under NCCL failed (socket, shared memory, IB verbs, CUDA)",
            "the NCCL WARN lines just before it name the failing call; rerun with NCCL_DEBUG=INFO "
            "NCCL_DEBUG_SUBSYS=INIT,NET,ENV if they are missing",
        ),
        Rule(
            "ib_completion",
            "`NET/IB : Got completion from peer ADDR with error N ... vendor err M`",
            "an InfiniBand/RoCE work request failed (see the status in the message)",
            "check the IB link with `ibv_devinfo` and `ibstat` on both nodes",
        ),
        Rule(
            "warn",
            "any other `NCCL WARN` line, grouped with numbers normalised",
            "NCCL printed this warning; rankscope has no rule for it",
            "the lines before it in the same rank's output show the context; NCCL's troubleshooting "
            "guide (docs.nvidia.com/deeplearning/nccl, Troubleshooting) lists common causes",
        ),
    )
}

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
class NcclFinding:
    """Something NCCL's output says is wrong (or suspicious): the rule, what was seen, cause and fix.

    ``kind`` is the rule id; ``next_step`` is the fix; ``who`` the processes as labelled, ``ranks``
    their NCCL ranks (or the rank of their prefix) where known; ``evidence`` the lines, file:line.
    """

    kind: str
    message: str
    next_step: str
    who: list[str] = field(default_factory=list)
    example: str = ""
    cause: str = ""
    ranks: list[int] = field(default_factory=list)
    evidence: list[NcclEvidence] = field(default_factory=list)


@dataclass
class Hit:
    """A signal matched on one line: whose line, the match's groups, and where it is."""

    who: str
    host: Optional[str]
    rank: Optional[int]
    groups: tuple[Optional[str], ...]
    evidence: NcclEvidence
    proc: Optional[NcclProcess] = None


def finding(
    rule_id: str,
    message: str,
    hits: Iterable[Hit] = (),
    procs: Iterable[NcclProcess] = (),
    facts: tuple[str, ...] = (),
    **words: str,
) -> NcclFinding:
    """A finding of ``rule_id`` with its wording, the ranks and evidence of ``hits`` and ``procs``
    (for a process: the lines that told its ``facts``, see :meth:`NcclProcess.read_info`)."""
    rule = RULES[rule_id]
    who: dict[str, None] = {}
    ranks: set[int] = set()
    evidence: list[NcclEvidence] = []
    for hit in hits:
        who.setdefault(hit.who, None)
        if hit.rank is not None:
            ranks.add(hit.rank)
        if len(evidence) < EVIDENCE:
            evidence.append(hit.evidence)
    for proc in procs:
        who.setdefault(proc.who, None)
        if proc.rank is not None:
            ranks.add(proc.rank)
        for fact in facts:
            if fact in proc.facts_at and len(evidence) < EVIDENCE:
                evidence.append(proc.facts_at[fact])
    return NcclFinding(
        rule_id,
        message,
        rule.fix.format(**words),
        list(who),
        evidence[0].line if evidence else "",
        rule.cause.format(**words),
        sorted(ranks),
        evidence,
    )


def _ranks_text(hits: list[Hit]) -> str:
    ranks = sorted({h.rank for h in hits if h.rank is not None})
    return RankSet.of(ranks).phrase() if ranks else ", ".join(dict.fromkeys(h.who for h in hits))


# ----------------------------------------------------------------------------- interfaces


def interface_findings(
    hits: dict[str, list[Hit]], procs: list[NcclProcess], host: Optional[HostFacts]
) -> list[NcclFinding]:
    """``interface_not_found``: one finding per (variable, value), with the interfaces that exist."""
    groups: dict[tuple[str, str], list[Hit]] = {}
    for hit in hits.get("no_socket_interface", []):
        value = hit.proc.env.get("NCCL_SOCKET_IFNAME") if hit.proc else None
        groups.setdefault(("NCCL_SOCKET_IFNAME", value or "?"), []).append(hit)
    for hit in hits.get("gloo_no_interface", []):
        groups.setdefault(("GLOO_SOCKET_IFNAME", hit.groups[0] or "?"), []).append(hit)
    for hit in hits.get("ib_no_device", []):
        value = hit.proc.env.get("NCCL_IB_HCA") if hit.proc else None
        if value:
            groups.setdefault(("NCCL_IB_HCA", value), []).append(hit)
    findings = []
    for (var, value), group in groups.items():
        hosts = sorted({h.host for h in group if h.host})
        where = f" on {', '.join(hosts)}" if hosts else ""
        setting = (
            f"{var}={value}"
            if value != "?"
            else f"{var} (its value is not in the log: NCCL_DEBUG_SUBSYS=ENV prints it)"
        )
        exists = _existing(var, hosts, procs, host)
        kind = "InfiniBand device" if var == "NCCL_IB_HCA" else "network interface"
        message = f"{setting} matches no {kind}{where} ({_ranks_text(group)})"
        if exists:
            message += f"; {exists}"
        findings.append(finding("interface_not_found", message, group, var=var))
    return findings


def _existing(var: str, hosts: list[str], procs: list[NcclProcess], host: Optional[HostFacts]) -> str:
    """The interfaces (or IB devices) that do exist, from the log and, when it ran here, this host."""
    parts = []
    if var == "NCCL_IB_HCA":
        seen = sorted({d for p in procs for d in p.ib_devices})
        if seen:
            parts.append(f"InfiniBand devices in the log: {', '.join(seen)}")
        if host is not None and _ran_here(hosts, host) and host.ib_devices:
            parts.append(f"on {host.name}: {', '.join(host.ib_devices)} (/sys/class/infiniband)")
        return "; ".join(parts)
    local = sorted({i for p in procs if not hosts or p.host in hosts for i in _interfaces(p)})
    if local:
        parts.append(f"interfaces NCCL used there: {', '.join(local)}")
    else:
        elsewhere = sorted({i for p in procs for i in _interfaces(p)})
        if elsewhere:
            parts.append(f"interfaces NCCL used on other nodes: {', '.join(elsewhere)}")
    if host is not None and _ran_here(hosts, host) and host.interfaces:
        parts.append(f"interfaces on {host.name}: {', '.join(host.interfaces)}")
    return "; ".join(parts)


def _interfaces(proc: NcclProcess) -> list[str]:
    names = list(proc.socket_interfaces)
    names.extend(n for n in (proc.oob_interface, proc.bootstrap_interface) if n)
    return names


def _ran_here(hosts: list[str], host: HostFacts) -> bool:
    """The log's lines came from this host, or name no host at all."""
    return not hosts or any(host.is_host(h) for h in hosts)


# ----------------------------------------------------------------------------- GPUs


def duplicate_gpu_findings(hits: dict[str, list[Hit]], procs: list[NcclProcess]) -> list[NcclFinding]:
    """``duplicate_gpu``: NCCL's own WARN, or two ranks of one communicator with one busId on a host."""
    warned = hits.get("duplicate_gpu", [])
    by_gpu: dict[tuple[str, str, str], list[NcclProcess]] = {}
    for proc in procs:
        if proc.bus_id is not None:
            # older NCCL prints no commId: ranks of one size on one host and bus are one communicator's
            comm = proc.comm_id if proc.comm_id is not None else f"nranks={proc.nranks}"
            by_gpu.setdefault((proc.host, comm, proc.bus_id), []).append(proc)
    shared = {key: group for key, group in by_gpu.items() if len(group) > 1}
    if not warned and not shared:
        return []
    ranks = {int(g) for h in warned for g in h.groups[:2] if g is not None}
    ranks |= {p.rank for group in shared.values() for p in group if p.rank is not None}
    devices = sorted({h.groups[2] for h in warned if h.groups[2]} | {key[2] for key in shared})
    hosts = sorted({h.host for h in warned if h.host} | {key[0] for key in shared})
    message = (
        f"{RankSet.of(ranks).phrase()} share{'s' if len(ranks) == 1 else ''} one GPU (busId {', '.join(devices)}) on {', '.join(hosts)}"
        if ranks
        else f"two ranks share one GPU (busId {', '.join(devices)})"
    )
    found = finding(
        "duplicate_gpu", message, warned, [p for group in shared.values() for p in group], facts=("comm",)
    )
    found.ranks = sorted(set(found.ranks) | ranks)
    return [found]


# ----------------------------------------------------------------------------- network choice


def network_findings(procs: list[NcclProcess], host: Optional[HostFacts]) -> list[NcclFinding]:
    findings: list[NcclFinding] = []
    sockets = [p for p in procs if p.network == "Socket"]
    ib_seen = [p for p in procs if p.ib_devices]
    hosts = sorted({p.host for p in procs})
    here = host is not None and host.has_uverbs and _ran_here(hosts, host)
    if sockets and (ib_seen or here):
        where = (
            f"InfiniBand devices in the log: {', '.join(sorted({d for p in ib_seen for d in p.ib_devices}))}"
            if ib_seen
            else f"{host.name if host else 'this host'} has /dev/infiniband/uverbs*"
        )
        disabled = sorted(
            {f"{k}={v}" for p in sockets for k, v in p.env.items() if k in ("NCCL_IB_DISABLE", "NCCL_NET")}
        )
        message = f"{len(sockets)} process(es) use NET/Socket although InfiniBand is there ({where})"
        if disabled:
            message += f"; set: {', '.join(disabled)}"
        findings.append(finding("ib_unused", message, procs=sockets, facts=("network",)))
    elif sockets and (len(hosts) > 1 or any(p.network == "IB" for p in procs)):
        ib_elsewhere = [p for p in procs if p.network == "IB"]
        message = f"{len(sockets)} process(es) send NCCL traffic over TCP sockets (NET/Socket) between nodes"
        if ib_elsewhere:
            message += f" while {len(ib_elsewhere)} use InfiniBand/RoCE"
        findings.append(finding("socket_fallback", message, procs=sockets, facts=("network",)))
    interfaces: dict[str, list[NcclProcess]] = {}
    for p in procs:
        if p.interface:
            interfaces.setdefault(p.interface, []).append(p)
    if len(interfaces) > 1:
        summary = "; ".join(f"{name}: {_fold(group)}" for name, group in sorted(interfaces.items()))
        findings.append(
            finding(
                "interface_mismatch",
                f"ranks chose different network interfaces ({summary})",
                procs=[p for group in interfaces.values() for p in group],
                facts=("interface",),
            )
        )
    counts = Counter(p.version for p in procs if p.version)
    versions = set(counts)
    if len(versions) > 1:
        detail = "; ".join(f"{v}: {_fold([p for p in procs if p.version == v])}" for v in sorted(versions))
        findings.append(
            finding(
                "version_mismatch",
                f"different NCCL versions across ranks: {', '.join(sorted(versions))} ({detail})",
                # the rarest versions first, so that the evidence shows them however many ranks agree
                procs=sorted((p for p in procs if p.version), key=lambda p: counts[p.version or ""]),
                facts=("version",),
            )
        )
    return findings


def _fold(procs: list[NcclProcess]) -> str:
    who = [p.who for p in procs]
    return (
        fold_labels([w.encode() for w in who])
        if all(":" in w and " " not in w for w in who)
        else ", ".join(who)
    )


# ----------------------------------------------------------------------------- messages


def message_findings(hits: dict[str, list[Hit]]) -> list[NcclFinding]:
    """Findings read from one kind of message each: IB completions, shm, connections, timeouts."""
    findings: list[NcclFinding] = []
    completions: dict[str, list[Hit]] = {}
    for hit in hits.get("ib_completion", []):
        completions.setdefault(hit.groups[1] or "?", []).append(hit)
    for status, group in sorted(completions.items()):
        meaning, step = IB_STATUS.get(
            status, (f"InfiniBand completion error status {status}", RULES["ib_completion"].fix)
        )
        vendor = sorted({h.groups[2] for h in group if h.groups[2]})
        found = finding(
            "ib_completion",
            f"InfiniBand completions failed with status {status} (vendor err {', '.join(vendor)}; "
            f"{len(group)}x, {_ranks_text(group)})",
            group,
        )
        found.kind, found.cause, found.next_step = f"ib_completion_{status}", meaning, step
        findings.append(found)
    for signal, rule_id, describe in _ONE_SIGNAL:
        group = hits.get(signal, [])
        if group:
            findings.append(finding(rule_id, describe(group), group))
    failed: dict[str, list[Hit]] = {}
    for hit in hits.get("connect_failed", []):
        reason = (hit.groups[1] or "").strip()
        if "refused" not in reason.lower():
            failed.setdefault(NUMBERS.sub("<n>", reason), []).append(hit)
    for reason, group in sorted(failed.items(), key=lambda item: -len(item[1])):
        peers = sorted({(h.groups[0] or "").split("<", 1)[0] for h in group})
        findings.append(
            finding(
                "connect_failed",
                f"connections failed: {reason} ({len(group)}x, to {', '.join(peers)}; {_ranks_text(group)})",
                group,
            )
        )
    return findings


def _shm(hits: list[Hit]) -> str:
    sizes = sorted({int(g) for h in hits for g in (h.groups[1], h.groups[3]) if g})
    size = f" ({max(sizes) / 1e6:.1f} MB)" if sizes else ""
    return f"could not create a shared-memory segment in /dev/shm{size} ({_ranks_text(hits)})"


def _timeouts(hits: list[Hit]) -> str:
    works = sorted({_work(h.groups[0] or "") for h in hits})
    more = " ..." if len(works) > 4 else ""
    return f"collectives timed out on {_ranks_text(hits)}: {'; '.join(works[:4])}{more}"


#: Rules read from one signal each: (signal, rule id, what the finding says about its hits).
_ONE_SIGNAL: tuple[tuple[str, str, Callable[[list[Hit]], str]], ...] = (
    ("shm_segment", "shm_too_small", _shm),
    ("connect_refused", "connection_refused", lambda h: f"connections refused ({len(h)}x, {_ranks_text(h)})"),
    ("watchdog_timeout", "watchdog_timeout", _timeouts),
    (
        "p2p_unsupported",
        "p2p_unsupported",
        lambda h: f"CUDA peer access between two GPUs is not supported ({len(h)}x, {_ranks_text(h)})",
    ),
    ("remote_error", "remote_error", lambda h: f"a peer exited or the network failed ({_ranks_text(h)})"),
    ("cuda_oom", "cuda_oom", lambda h: f"CUDA out of memory inside NCCL ({len(h)}x, {_ranks_text(h)})"),
    (
        "cuda_init_error",
        "cuda_init_error",
        lambda h: f"CUDA 'initialization error' inside NCCL ({len(h)}x, {_ranks_text(h)})",
    ),
    (
        "cuda_invalid_argument",
        "cuda_invalid_argument",
        lambda h: f"CUDA 'invalid argument' inside NCCL ({len(h)}x, {_ranks_text(h)})",
    ),
    (
        "cuda_failure",
        "cuda_failure",
        lambda h: f"a CUDA call failed inside NCCL: '{h[0].groups[1]}' ({len(h)}x, {_ranks_text(h)})",
    ),
    (
        "no_algorithm",
        "no_algorithm",
        lambda h: f"no NCCL algorithm/protocol available for a collective ({len(h)}x, {_ranks_text(h)})",
    ),
    ("net_ofi_error", "net_ofi_error", lambda h: f"NET/OFI errors ({len(h)}x, {_ranks_text(h)})"),
    (
        "ib_verbs_failed",
        "ib_verbs_failed",
        lambda h: f"an InfiniBand verbs call failed: {h[0].groups[0]} ({len(h)}x, {_ranks_text(h)})",
    ),
    (
        "system_error",
        "unhandled_system_error",
        lambda _h: "NCCL 'unhandled system error': a system call or library (socket, IB verbs, CUDA) failed",
    ),
)


NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")
_WORK_FIELDS = re.compile(r"(SeqNum|OpType)=([^,)\s]+)")


def _work(text: str) -> str:
    """``SeqNum=78, OpType=BROADCAST, NumelIn=80, ...`` -> ``BROADCAST SeqNum=78``."""
    fields = dict(_WORK_FIELDS.findall(text))
    return f"{fields.get('OpType', '?')} SeqNum={fields.get('SeqNum', '?')}"
