"""Facts in, verdicts out (pure): each check says what it found and, when it is not PASS, the exact fix."""

from __future__ import annotations

import re
import resource
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Optional

from rankscope.doctor.facts import Facts, Limits, TorchInfo
from rankscope.doctor.report import Check, Status
from rankscope.net.ifname import is_loopback, parse_gloo, parse_nccl, selected, unmatched
from rankscope.nvidia.nvsmi import Gpu

_MIB = 1024 * 1024
_GIB = 1024 * _MIB
#: Docker gives a container 64 MiB of /dev/shm unless told otherwise.
_DOCKER_SHM = 64 * _MIB
#: DataLoader workers pass batches through /dev/shm and NCCL puts its intra-node buffers there.
_SHM_ENOUGH = 1 * _GIB
_SHM_FIX = (
    "docker run --shm-size=16g (or --ipc=host); Kubernetes: mount an emptyDir with medium: Memory at "
    "/dev/shm; bare metal: mount -o remount,size=16G /dev/shm"
)
_TOOL_NEEDS = {
    "py-spy": (Status.FAIL, "rankscope stacks dumps every rank with it", "pip install py-spy"),
    "gdb": (
        Status.WARN,
        "native backtraces of core files and hung processes",
        "apt-get install gdb (dnf install gdb)",
    ),
    "strace": (
        Status.WARN,
        "what a hung process waits for in the kernel",
        "apt-get install strace (dnf install strace)",
    ),
    "pystack": (Status.WARN, "Python stacks from core files", "pip install pystack"),
}
_ORDER = {Status.PASS: 0, Status.SKIP: 0, Status.WARN: 1, Status.FAIL: 2}
_VIRTUAL = ("lo", "docker", "veth", "virbr", "br-", "ifb", "tun", "tap")


def size(n: int) -> str:
    return f"{n / _GIB:.1f} GiB" if n >= _GIB else f"{n // _MIB} MiB"


def _limit(value: int) -> str:
    return (
        "unlimited" if value == resource.RLIM_INFINITY else size(value) if value >= _MIB else f"{value} bytes"
    )


def worst(*statuses: Status) -> Status:
    return max(statuses, key=lambda s: _ORDER[s])


def suggest_interface(interfaces: Sequence[str]) -> str:
    """The interface to name in a fix: the first one that is not loopback, a bridge or a tunnel."""
    real = [name for name in interfaces if not name.startswith(_VIRTUAL)]
    return real[0] if real else "<interface>"


# --- tools and permissions ------------------------------------------------------------------


def tools(facts: Facts) -> list[Check]:
    found = []
    for tool, (missing, need, fix) in _TOOL_NEEDS.items():
        path = facts.tools.get(tool)
        if path:
            found.append(Check(tool, Status.PASS, f"{tool}: {path}"))
        else:
            found.append(Check(tool, missing, f"{tool} not found ({need})", fix))
    return found


def ptrace(facts: Facts) -> Check:
    scope = facts.yama_scope
    scope_text = "no yama (classic ptrace rules)" if scope is None else f"kernel.yama.ptrace_scope={scope}"
    container = (
        " In a container: docker run --cap-add=SYS_PTRACE (Kubernetes: securityContext.capabilities.add: [SYS_PTRACE])."
        if facts.in_container
        else ""
    )
    if scope == 3:
        return Check(
            "ptrace",
            Status.FAIL,
            f"{scope_text}: no process may attach to another until reboot (py-spy, gdb, strace all fail)",
            "set kernel.yama.ptrace_scope = 1 (or 0) in /etc/sysctl.d/10-ptrace.conf and reboot: 3 cannot be lowered at run time",
        )
    if facts.cap_sys_ptrace:
        return Check("ptrace", Status.PASS, f"CAP_SYS_PTRACE held: can attach to any process; {scope_text}")
    if scope == 2:
        return Check(
            "ptrace",
            Status.FAIL,
            f"{scope_text}: only CAP_SYS_PTRACE may attach, and this process lacks it",
            "run rankscope stacks / py-spy with sudo." + container,
        )
    if scope == 1:
        return Check(
            "ptrace",
            Status.WARN,
            f"{scope_text}: py-spy may attach only to its own children, not to a running job",
            "run with sudo, or sudo sysctl -w kernel.yama.ptrace_scope=0 (persist it in /etc/sysctl.d/10-ptrace.conf)."
            + container,
        )
    if facts.in_container:
        return Check(
            "ptrace",
            Status.WARN,
            f"in a container without CAP_SYS_PTRACE ({scope_text}): attaching may be refused by the seccomp profile",
            container.strip(),
        )
    return Check("ptrace", Status.PASS, f"{scope_text}: your own processes can be attached")


# --- core dumps -----------------------------------------------------------------------------


def core_destination(pattern: Optional[str], uses_pid: bool) -> tuple[Status, str, Optional[str]]:
    """Where a crashing process's core goes, for kernel.core_pattern: (status, where, fix)."""
    plain_path_fix = "sudo sysctl -w kernel.core_pattern=/tmp/core-%e.%p.%h.%t (persist it in /etc/sysctl.d/)"
    if not pattern:
        return Status.WARN, "kernel.core_pattern could not be read", None
    if pattern.startswith("|"):
        program = pattern[1:].split()[0] if pattern[1:].split() else "?"
        if "systemd-coredump" in program:
            return (
                Status.PASS,
                "cores go to systemd-coredump (/var/lib/systemd/coredump): coredumpctl list; "
                "coredumpctl dump PID -o core.PID writes one out; coredumpctl gdb PID opens it",
                None,
            )
        if "apport" in program:
            return (
                Status.WARN,
                "cores go to apport: crashes of packaged programs become /var/crash/*.crash, others land in "
                "/var/lib/apport/coredump/ only when apport is enabled; a venv or conda python is easily lost",
                plain_path_fix,
            )
        return Status.WARN, f"cores are piped to {program}; where they land is up to it", plain_path_fix
    name = pattern.rsplit("/", 1)[-1] + (".PID" if uses_pid and "%p" not in pattern else "")
    if pattern.startswith("/"):
        directory = pattern.rsplit("/", 1)[0] or "/"
        return (
            Status.PASS,
            f"cores land in {directory} as {name} (%e program, %p pid, %h host, %t time)",
            None,
        )
    return Status.PASS, f"cores land in the crashing process's working directory as {name}", None


@dataclass(frozen=True)
class CoreRisk:
    """One way the node's core settings lose or hide a rank's core, and the fix."""

    status: Status
    problem: str
    fix: str


#: core_uses_pid=1 is the smallest fix for a pattern without %p: the kernel appends .PID.
_USES_PID_FIX = (
    "sudo sysctl -w kernel.core_uses_pid=1 (or put %p in kernel.core_pattern); persist it in /etc/sysctl.d/"
)


def core_risks(
    pattern: Optional[str],
    uses_pid: bool,
    limit: Limits,
    in_container: bool = False,
    cwd_writable: Optional[bool] = None,
    handler_installed: Optional[bool] = None,
    handler_running: Optional[bool] = None,
) -> list[CoreRisk]:
    """Settings that lose or hide cores, from what was read (pure: no reading here)."""
    risks: list[CoreRisk] = []
    if limit.soft == 0 and limit.hard != 0:
        risks.append(
            CoreRisk(
                Status.WARN,
                f"ulimit -c is 0 under a hard limit of {_limit(limit.hard)}: no core is written",
                "ulimit -c unlimited in the job script before the launcher (srun propagates it)",
            )
        )
    if not pattern:
        return risks
    if pattern.startswith("|"):
        program = pattern[1:].split()[0] if pattern[1:].split() else "?"
        if in_container:
            risks.append(
                CoreRisk(
                    Status.WARN,
                    f"in a container, cores are piped to {program} on the host (core_pattern is the host's "
                    "and its handler runs outside the container): they never appear in here",
                    "read them on the host (coredumpctl list), or ask the admin for an absolute "
                    "kernel.core_pattern path that is mounted into the container",
                )
            )
        elif handler_installed is False:
            risks.append(
                CoreRisk(
                    Status.FAIL,
                    f"cores are piped to {program}, which is not installed: the kernel drops every core",
                    "install it (apt-get install systemd-coredump) or sudo sysctl -w "
                    "kernel.core_pattern=/tmp/core-%e.%p.%h.%t",
                )
            )
        elif handler_running is False:
            risks.append(
                CoreRisk(
                    Status.FAIL,
                    f"cores are piped to {program}, but its socket /run/systemd/coredump is missing "
                    "(systemd not running here): the core is dropped",
                    "sudo systemctl start systemd-coredump.socket, or sudo sysctl -w "
                    "kernel.core_pattern=/tmp/core-%e.%p.%h.%t",
                )
            )
        return risks
    if "%p" not in pattern and not uses_pid:
        where = "working directory" if not pattern.startswith("/") else "directory"
        risks.append(
            CoreRisk(
                Status.WARN,
                f"kernel.core_pattern={pattern} has no %p and core_uses_pid=0: ranks that crash in one "
                f"{where} write the same file and only the last core survives",
                _USES_PID_FIX,
            )
        )
    if not pattern.startswith("/") and cwd_writable is False:
        risks.append(
            CoreRisk(
                Status.WARN,
                "kernel.core_pattern is relative and this working directory is not writable: a rank "
                "started here leaves no core",
                "start the job in a writable directory, or sudo sysctl -w "
                "kernel.core_pattern=/tmp/core-%e.%p.%h.%t",
            )
        )
    return risks


def core_dumps(facts: Facts) -> Check:
    where_status, where, where_fix = core_destination(facts.core_pattern, facts.core_uses_pid)
    detail = (f"kernel.core_pattern = {facts.core_pattern}", where)
    risks = core_risks(
        facts.core_pattern,
        facts.core_uses_pid,
        facts.core_limit,
        facts.in_container,
        facts.cwd_writable,
        facts.core_handler_installed,
        facts.core_handler_running,
    )
    soft, hard = facts.core_limit.soft, facts.core_limit.hard
    fixes = [risk.fix for risk in risks]
    status = worst(where_status, *(risk.status for risk in risks))
    if soft == 0:
        if hard == 0:
            fixes.insert(
                0,
                "the hard limit is 0 too: raise it in /etc/security/limits.conf (* hard core unlimited), "
                "docker run --ulimit core=-1, or ask the admin; then ulimit -c unlimited",
            )
        summary = f"ulimit -c is 0: a crashing rank leaves no core file; {where}"
        status = worst(Status.WARN, status)
    else:
        summary = f"ulimit -c {_limit(soft) if soft != resource.RLIM_INFINITY else 'unlimited'}; {where}"
    summary += "".join(f"; {risk.problem}" for risk in risks if not risk.problem.startswith("ulimit -c is 0"))
    if where_fix and where_fix not in fixes:
        fixes.append(where_fix)
    return Check("core-dumps", status, summary, "; ".join(dict.fromkeys(fixes)) or None, detail)


# --- memory limits --------------------------------------------------------------------------


def shared_memory(facts: Facts) -> Check:
    if facts.shm is None:
        return Check(
            "/dev/shm",
            Status.FAIL,
            "/dev/shm does not exist: DataLoader workers and NCCL cannot share memory",
            _SHM_FIX,
        )
    total, free = facts.shm
    text = f"/dev/shm {size(total)} ({size(free)} free)"
    if total <= _DOCKER_SHM:
        return Check(
            "/dev/shm",
            Status.FAIL,
            f"{text}: docker's default; DataLoader workers die with 'bus error' and NCCL fails with "
            "'unhandled system error' (failed to extend /dev/shm)",
            _SHM_FIX,
        )
    if total < _SHM_ENOUGH:
        return Check("/dev/shm", Status.WARN, f"{text}: NCCL and DataLoader workers want a few GiB", _SHM_FIX)
    if free < _SHM_ENOUGH // 2:
        return Check(
            "/dev/shm",
            Status.WARN,
            f"{text}: nearly full",
            "remove what dead jobs left: ls -la /dev/shm (torch_*, nccl-*, psm_*), then rm the stale ones",
        )
    return Check("/dev/shm", Status.PASS, text)


def memlock(facts: Facts) -> Check:
    soft = facts.memlock.soft
    text = f"ulimit -l {_limit(soft)}"
    if soft == resource.RLIM_INFINITY:
        return Check("memlock", Status.PASS, text)
    if facts.infiniband:
        return Check(
            "memlock",
            Status.FAIL,
            f"{text} with InfiniBand devices ({', '.join(facts.infiniband)}): NCCL cannot register (pin) its "
            "buffers and fails or falls back to slow sockets",
            "ulimit -l unlimited; hard limit: '* - memlock unlimited' in /etc/security/limits.conf; "
            "docker run --ulimit memlock=-1; SLURM: PropagateResourceLimitsExcept=MEMLOCK in slurm.conf",
            _limits_detail(facts.memlock),
        )
    return Check("memlock", Status.PASS, f"{text} (matters only for InfiniBand/RDMA; no device here)")


def _limits_detail(limits: Limits) -> tuple[str, ...]:
    return (f"soft {_limit(limits.soft)}, hard {_limit(limits.hard)}",)


# --- names and interfaces -------------------------------------------------------------------


def hostname(facts: Facts) -> Check:
    name, addresses = facts.hostname, facts.host_addresses
    iface = suggest_interface(facts.interfaces)
    if addresses is None:
        return Check(
            "hostname",
            Status.WARN,
            f"host name {name} does not resolve: torch.distributed advertises this node by it",
            f"add '<this node's address> {name}' to /etc/hosts, or export GLOO_SOCKET_IFNAME={iface} NCCL_SOCKET_IFNAME={iface}",
        )
    loopback = all(is_loopback(a) for a in addresses)
    text = f"{name} resolves to {', '.join(addresses)}"
    if not loopback:
        return Check("hostname", Status.PASS, text)
    if "GLOO_SOCKET_IFNAME" in facts.env and "NCCL_SOCKET_IFNAME" in facts.env:
        return Check(
            "hostname", Status.PASS, f"{text} (loopback), but GLOO_/NCCL_SOCKET_IFNAME choose the interface"
        )
    return Check(
        "hostname",
        Status.WARN,
        f"{text} only (loopback): gloo and NCCL advertise a loopback address to the other nodes, and a multi-node job hangs",
        f"export GLOO_SOCKET_IFNAME={iface} NCCL_SOCKET_IFNAME={iface} (or map {name} to its real address in /etc/hosts)",
    )


def _nccl_list(facts: Facts, variable: str, names: Sequence[str], kind: str, fix_value: str) -> Check:
    value = facts.env[variable]
    spec = parse_nccl(value)
    chosen = selected(spec, names)
    missing = unmatched(spec, names)
    have = ", ".join(names) or "none"
    if not chosen:
        what = "excludes every" if spec.exclude else "matches no"
        return Check(
            variable,
            Status.FAIL,
            f"{variable}={value} {what} {kind} here ({kind}s: {have}): NCCL fails at init",
            f"export {variable}={fix_value}",
        )
    if missing and not spec.exclude:
        return Check(
            variable,
            Status.WARN,
            f"{variable}={value}: {', '.join(missing)} matches no {kind} here (NCCL uses {', '.join(chosen)})",
            f"export {variable}={','.join(e for e in spec.entries if e not in missing)}",
        )
    if chosen == ["lo"]:
        return Check(
            variable,
            Status.WARN,
            f"{variable}={value} selects only loopback: other nodes cannot reach it",
            f"export {variable}={fix_value}",
        )
    return Check(variable, Status.PASS, f"{variable}={value}: NCCL may use {', '.join(chosen)}")


def interface_variables(facts: Facts) -> list[Check]:
    iface = suggest_interface(facts.interfaces)
    found = []
    if "NCCL_SOCKET_IFNAME" in facts.env:
        found.append(_nccl_list(facts, "NCCL_SOCKET_IFNAME", facts.interfaces, "interface", iface))
    if "GLOO_SOCKET_IFNAME" in facts.env:
        value = facts.env["GLOO_SOCKET_IFNAME"]
        missing = [e for e in parse_gloo(value).entries if e not in facts.interfaces]
        if missing or not parse_gloo(value).entries:
            found.append(
                Check(
                    "GLOO_SOCKET_IFNAME",
                    Status.FAIL,
                    f"GLOO_SOCKET_IFNAME={value}: {', '.join(missing) or 'empty'} is not an interface here "
                    f"(interfaces: {', '.join(facts.interfaces)}; gloo wants exact names)",
                    f"export GLOO_SOCKET_IFNAME={iface}",
                )
            )
        else:
            found.append(Check("GLOO_SOCKET_IFNAME", Status.PASS, f"GLOO_SOCKET_IFNAME={value}: exists"))
    if "NCCL_IB_HCA" in facts.env:
        hca = facts.infiniband[0] if facts.infiniband else "<hca>"
        found.append(_nccl_list(facts, "NCCL_IB_HCA", facts.infiniband, "InfiniBand device", hca))
    if not found:
        found.append(
            Check(
                "socket-interfaces",
                Status.SKIP,
                f"no NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME set (interfaces here: {', '.join(facts.interfaces)})",
            )
        )
    return found


# --- GPUs -----------------------------------------------------------------------------------

_DEVICE_ID = re.compile(r"^(?:\d+|GPU-[0-9A-Fa-f-]+|MIG-[0-9A-Za-z/-]+)$")


def visible_devices(facts: Facts) -> Check:
    value = facts.env.get("CUDA_VISIBLE_DEVICES")
    gpus = facts.nvidia.gpus if facts.nvidia else ()
    count = len(gpus) if facts.nvidia else (facts.torch.device_count if facts.torch else None)
    if value is None:
        if count:
            return Check("CUDA_VISIBLE_DEVICES", Status.PASS, f"not set: all {count} GPU(s) visible")
        return Check("CUDA_VISIBLE_DEVICES", Status.SKIP, "not set")
    entries = [e.strip() for e in value.split(",")]
    fix_all = "unset CUDA_VISIBLE_DEVICES, or list this node's devices: export CUDA_VISIBLE_DEVICES=0,1,..."
    if not value.strip():
        return Check(
            "CUDA_VISIBLE_DEVICES",
            Status.FAIL,
            "CUDA_VISIBLE_DEVICES is set but empty: no GPU is visible",
            fix_all,
        )
    bad = [e for e in entries if not _DEVICE_ID.match(e)]
    if bad:
        return Check(
            "CUDA_VISIBLE_DEVICES",
            Status.FAIL,
            f"CUDA_VISIBLE_DEVICES={value}: {bad[0]!r} is not an index or UUID; CUDA hides it and every device after it",
            fix_all,
        )
    if len(set(entries)) < len(entries):
        twice = sorted({e for e in entries if entries.count(e) > 1})
        return Check(
            "CUDA_VISIBLE_DEVICES",
            Status.FAIL,
            f"CUDA_VISIBLE_DEVICES={value} lists {', '.join(twice)} twice: two ranks would share one GPU "
            "(NCCL: 'Duplicate GPU detected')",
            fix_all,
        )
    if count is not None:
        beyond = [e for e in entries if e.isdigit() and int(e) >= count]
        uuids = {g.uuid for g in gpus if g.uuid}
        unknown = [e for e in entries if e.startswith("GPU-") and uuids and e not in uuids]
        if beyond or unknown:
            return Check(
                "CUDA_VISIBLE_DEVICES",
                Status.FAIL,
                f"CUDA_VISIBLE_DEVICES={value} names {', '.join(beyond + unknown)}, not on this node ({count} GPU(s))",
                fix_all,
            )
    return Check(
        "CUDA_VISIBLE_DEVICES", Status.PASS, f"CUDA_VISIBLE_DEVICES={value}: {len(entries)} GPU(s) visible"
    )


def nvidia(facts: Facts) -> list[Check]:
    info = facts.nvidia
    if info is None:
        if facts.nvidia_error:
            return [
                Check(
                    "nvidia-gpus",
                    Status.FAIL,
                    f"the NVIDIA driver does not answer: {facts.nvidia_error}",
                    "nvidia-smi; dmesg | grep -i -e NVRM -e Xid (a GPU that fell off the bus needs a reset or a reboot)",
                )
            ]
        return [Check("nvidia-gpus", Status.SKIP, "no NVIDIA driver here (no NVML, no nvidia-smi)")]
    names = sorted({g.name for g in info.gpus})
    detail = tuple(
        f"GPU{g.index} {g.name} {g.bus_id} memory {g.memory_used_mib}/{g.memory_total_mib} MiB, "
        f"{g.temperature_c} C, SM clock {g.sm_clock_mhz}/{g.max_sm_clock_mhz} MHz"
        for g in info.gpus
    )
    found = [
        Check(
            "nvidia-gpus",
            Status.PASS if info.gpus else Status.FAIL,
            f"{len(info.gpus)} x {', '.join(names) or 'no GPU'}, driver {info.driver}, CUDA {info.cuda} (via {info.source})",
            None if info.gpus else "nvidia-smi -L; dmesg | grep -i NVRM",
            detail,
        )
    ]
    found.append(_ecc(info.gpus))
    slow = [f"GPU{g.index}: {', '.join(g.slowdowns)}" for g in info.gpus if g.slowdowns]
    found.append(
        Check(
            "gpu-clocks",
            Status.WARN,
            "clocks held down by " + "; ".join(slow),
            "check cooling and power: nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER",
        )
        if slow
        else Check("gpu-clocks", Status.PASS, "no thermal, power-brake or hardware slowdown active")
    )
    busy = [
        f"GPU{g.index}: pid {p.pid} {p.name or '?'}"
        + (f" ({p.used_mib} MiB)" if p.used_mib is not None else "")
        for g in info.gpus
        for p in g.processes
    ]
    found.append(
        Check(
            "gpu-processes",
            Status.WARN,
            "GPUs in use: " + "; ".join(busy),
            "a leftover of an earlier job makes the next one run out of memory or slow: ps -o pid,user,etime,cmd -p PID, then kill it",
        )
        if busy
        else Check("gpu-processes", Status.PASS, "no process on the GPUs")
    )
    if facts.topology is not None and facts.topology.links:
        found.append(_topology(facts))
    return found


def _ecc(gpus: Sequence[Gpu]) -> Check:
    bad: list[str] = []
    old: list[str] = []
    for gpu in gpus:
        if (gpu.ecc_uncorrected_volatile or 0) > 0 or gpu.reset_pending:
            bad.append(
                f"GPU{gpu.index} ({gpu.bus_id or gpu.uuid}): {gpu.ecc_uncorrected_volatile or 0} uncorrectable ECC "
                f"error(s) since the driver loaded"
                + (", a row remap waits for a reset" if gpu.reset_pending else "")
            )
        elif (gpu.ecc_uncorrected_aggregate or 0) > 0:
            old.append(
                f"GPU{gpu.index}: {gpu.ecc_uncorrected_aggregate} uncorrectable ECC error(s) in its lifetime"
            )
    if bad:
        return Check(
            "gpu-ecc",
            Status.FAIL,
            "; ".join(bad),
            "drain the node, then reset the GPU (nvidia-smi -r -i INDEX, or reboot); if errors come back, replace the board",
        )
    if old:
        return Check(
            "gpu-ecc",
            Status.WARN,
            "; ".join(old),
            "watch it: nvidia-smi -q -d ECC,ROW_REMAPPER after each job",
        )
    return Check("gpu-ecc", Status.PASS, "no uncorrectable ECC errors")


def _topology(facts: Facts) -> Check:
    topology = facts.topology
    assert topology is not None
    kinds = {link.kind for link in topology.links}
    detail = tuple(topology.text.splitlines())
    nvlinked = {k for k in kinds if k.startswith("NV")}
    slow = [f"{link.a}-{link.b} {link.kind}" for link in topology.links if not link.kind.startswith("NV")]
    if nvlinked and slow:
        return Check(
            "gpu-topology",
            Status.WARN,
            f"most GPU pairs use NVLink ({', '.join(sorted(nvlinked))}) but {', '.join(slow)} go over PCIe: a link may be down",
            "nvidia-smi nvlink --status; nvidia-smi topo -m after a GPU reset; report the node if a link stays down",
            detail,
        )
    return Check("gpu-topology", Status.PASS, f"GPU links: {', '.join(sorted(kinds))}", None, detail)


# --- torch, CUDA and NCCL versions ----------------------------------------------------------


def _version(text: Optional[str]) -> Optional[tuple[int, ...]]:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(part) for part in match.groups() if part is not None) if match else None


def versions(facts: Facts) -> Check:
    torch = facts.torch
    if torch is None:
        return Check(
            "torch",
            Status.SKIP,
            "torch is not installed for this Python: run `python -m rankscope doctor` with the job's interpreter to check its versions",
        )
    parts = [f"torch {torch.version}"]
    parts.append(
        f"CUDA {torch.cuda}" if torch.cuda else ("ROCm/HIP " + torch.hip if torch.hip else "CPU build")
    )
    if torch.nccl:
        parts.append(f"NCCL {torch.nccl}")
    elif torch.cuda:
        parts.append("NCCL unknown (--import-torch asks torch itself)")
    if torch.cuda_available is not None:
        parts.append(
            f"{torch.device_count} CUDA device(s) usable" if torch.cuda_available else "CUDA not usable"
        )
    return Check("torch", Status.PASS, ", ".join(parts))


def launch_blocking_hang(torch: Optional[TorchInfo]) -> Optional[tuple[Status, str, str]]:
    """What CUDA_LAUNCH_BLOCKING=1 risks with this torch's NCCL: (FAIL or WARN, the problem, the fix).

    None for a CPU-only torch (no NCCL to hang). ``rankscope rerun --sync`` asks the same question.
    """
    if torch is not None and not torch.cuda and not torch.hip:
        return None
    nccl = _version(torch.nccl if torch else None)
    # NVIDIA/nccl#750: from 2.13 the kernel launch blocks under CUDA_LAUNCH_BLOCKING=1 while the
    # proxy thread waits for work queued after it, so every rank spins at 100% forever (reported
    # on 2.13/2.14.3). NVIDIA/nccl#774 (merged early 2023) queues proxy work first but says it
    # resolves "some but not all" of these deadlocks (several GPUs per thread still can).
    fix = (
        "unset CUDA_LAUNCH_BLOCKING for NCCL jobs; to find an asynchronous CUDA error, rerun one rank "
        "without NCCL, or build with TORCH_USE_CUDA_DSA"
    )
    if nccl is not None and (2, 13) <= nccl[:2] < (2, 17):
        return (
            Status.FAIL,
            f"NCCL {torch.nccl if torch else ''} hangs with CUDA_LAUNCH_BLOCKING=1 (NVIDIA/nccl#750)",
            fix,
        )
    return (
        Status.WARN,
        "CUDA_LAUNCH_BLOCKING=1 can deadlock NCCL 2.13 and later (NVIDIA/nccl#750, #774)",
        fix,
    )


def known_issues(facts: Facts) -> Check:
    """Version and setting combinations documented to hang."""
    torch = facts.torch
    nccl = _version(torch.nccl if torch else None)
    found: list[tuple[Status, str, str]] = []
    blocking = launch_blocking_hang(torch) if facts.env.get("CUDA_LAUNCH_BLOCKING", "") == "1" else None
    if blocking is not None:
        found.append(blocking)
    torch_version = _version(torch.version if torch else None)
    if (
        torch_version is not None
        and torch_version[:3] == (2, 7, 0)
        and nccl is not None
        and nccl[:2] == (2, 26)
        and facts.env.get("TORCH_NCCL_USE_COMM_NONBLOCKING") != "0"
    ):
        # pytorch/pytorch#153960: with device_id passed to init_process_group, torch 2.7.0 turns on
        # NCCL's non-blocking mode, and NCCL 2.26 then hangs at random; torch 2.7.1 turned the mode
        # off again (pytorch/pytorch#154055).
        found.append(
            (
                Status.WARN,
                "torch 2.7.0 with NCCL 2.26 hangs at random when init_process_group gets device_id (pytorch/pytorch#153960)",
                "export TORCH_NCCL_USE_COMM_NONBLOCKING=0, or upgrade to torch 2.7.1 or later",
            )
        )
    if not found:
        return Check("known-hangs", Status.PASS, "no known hanging combination of versions and settings")
    status = worst(*(s for s, _, _ in found))
    return Check("known-hangs", status, "; ".join(t for _, t, _ in found), "; ".join(f for _, _, f in found))


#: The recorder's size variables: torch >= 2.5, then the NCCL-only name of 2.2-2.4.
FR_SIZE_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FR_DUMP_VARIABLES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


def flight_recorder(facts: Facts) -> Check:
    """Will torch's flight recorder keep every rank's collectives for `rankscope fr` (docs/fr.md)?"""
    sizes = {name: facts.env[name].strip() for name in FR_SIZE_VARIABLES if name in facts.env}
    dumps = [f"{name}={facts.env[name]}" for name in FR_DUMP_VARIABLES if name in facts.env]
    where = (
        dumps[0]
        if dumps
        else "TORCH_FR_DUMP_TEMP_FILE unset: NCCL timeout dumps go to /tmp/nccl_trace_rank_<rank>"
    )
    on = [f"{name}={value}" for name, value in sizes.items() if value.isdigit() and int(value) > 0]
    if on:
        return Check("flight-recorder", Status.PASS, f"flight recorder on ({on[0]}); {where}")
    if sizes:
        setting = ", ".join(f"{name}={value}" for name, value in sizes.items())
        return Check(
            "flight-recorder",
            Status.WARN,
            f"the flight recorder is off ({setting}): a collective desync cannot be traced to its call",
            "export TORCH_FR_BUFFER_SIZE=2000 (torch < 2.5: TORCH_NCCL_TRACE_BUFFER_SIZE=2000); rankscope fr reads the dumps",
        )
    return Check(
        "flight-recorder",
        Status.PASS,
        "TORCH_FR_BUFFER_SIZE unset: recent torch records by default (seen: 2.11 with NCCL and gloo, 2.13 "
        "with gloo), older releases may record nothing (export TORCH_FR_BUFFER_SIZE=2000 to be sure)",
        detail=(where,),
    )


# --- AMD ------------------------------------------------------------------------------------


def amd_iommu(facts: Facts) -> Check:
    """AMD Instinct GPUs and the IOMMU.

    AMD's MI300X system optimization guide (rocm.docs.amd.com, "System optimization" > "GRUB
    settings") and its IOMMU advisory for AMD Instinct
    (community.amd.com/t5/knowledge-base/iommu-advisory-for-amd-instinct/ta-p/484601) recommend
    ``iommu=pt``: with the IOMMU translating every DMA, peer-to-peer transfers between GPUs hang or
    crawl. ``amd_iommu=off`` / ``iommu=soft`` are the older workarounds.
    """
    if not facts.amd_gpus and not facts.kfd:
        return Check("amd-iommu", Status.SKIP, "no AMD GPU (/sys/class/drm vendor 0x1002, /dev/kfd)")
    params = (facts.cmdline or "").split()
    gpus = f"{facts.amd_gpus} AMD GPU(s)" if facts.amd_gpus else "/dev/kfd (ROCm)"
    if "iommu=pt" in params:
        return Check("amd-iommu", Status.PASS, f"{gpus}; kernel command line has iommu=pt")
    off = [p for p in params if p in ("amd_iommu=off", "iommu=off", "iommu=soft")]
    if off:
        return Check("amd-iommu", Status.PASS, f"{gpus}; IOMMU {off[0]} (AMD now recommends iommu=pt)")
    return Check(
        "amd-iommu",
        Status.WARN,
        f"{gpus} and no iommu=pt on the kernel command line: RCCL peer-to-peer transfers can hang or crawl",
        "add iommu=pt to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub "
        "(grub2-mkconfig -o /boot/grub2/grub.cfg on RHEL), reboot; check with cat /proc/cmdline",
        (f"/proc/cmdline: {facts.cmdline}",),
    )


CHECKS: tuple[Callable[[Facts], object], ...] = (
    tools,
    ptrace,
    core_dumps,
    shared_memory,
    memlock,
    hostname,
    interface_variables,
    visible_devices,
    versions,
    known_issues,
    flight_recorder,
    nvidia,
    amd_iommu,
)


def run_checks(facts: Facts) -> tuple[Check, ...]:
    found: list[Check] = []
    for check in CHECKS:
        result = check(facts)
        found.extend(result if isinstance(result, list) else [result])  # type: ignore[list-item]
    return tuple(found)
