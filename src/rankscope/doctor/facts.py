"""Everything the checks look at, read once from a :class:`System` (the only reading the doctor does)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import re
import resource
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rankscope.doctor.system import System
from rankscope.nvidia.nvsmi import NvidiaInfo, Topology, parse_topology
from rankscope.nvidia.read import read_nvidia
from rankscope.procfs import capeff_has_sys_ptrace

TOOLS = ("py-spy", "gdb", "strace", "pystack")
#: Environment variables the checks read (the report never shows any other).
ENV_NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "TORCH_NCCL_USE_COMM_NONBLOCKING",
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
)
_AMD_VENDOR = "0x1002"


@dataclass(frozen=True)
class TorchInfo:
    """Versions as this Python's torch install declares them (read without importing torch unless asked)."""

    version: str
    cuda: Optional[str] = None
    hip: Optional[str] = None
    nccl: Optional[str] = None
    #: Only known when torch was imported (``--import-torch``).
    cuda_available: Optional[bool] = None
    device_count: Optional[int] = None


@dataclass(frozen=True)
class Limits:
    soft: int
    hard: int


@dataclass(frozen=True)
class Facts:
    tools: dict[str, Optional[str]]
    euid: int
    yama_scope: Optional[int]
    cap_sys_ptrace: bool
    in_container: bool
    core_limit: Limits
    core_pattern: Optional[str]
    core_uses_pid: bool
    shm: Optional[tuple[int, int]]
    memlock: Limits
    infiniband: tuple[str, ...]
    torch: Optional[TorchInfo]
    env: dict[str, str]
    interfaces: tuple[str, ...]
    hostname: str
    host_addresses: Optional[list[str]]
    amd_gpus: int
    kfd: bool
    cmdline: Optional[str]
    nvidia: Optional[NvidiaInfo] = None
    topology: Optional[Topology] = None
    #: Why NVIDIA GPUs could not be read although a driver tool exists.
    nvidia_error: Optional[str] = field(default=None)
    #: Whether this working directory takes a core (for a relative core_pattern; None: not read).
    cwd_writable: Optional[bool] = None
    #: For a piped core_pattern: is its program here, is its service up (None: not a pipe, unknown).
    core_handler_installed: Optional[bool] = None
    core_handler_running: Optional[bool] = None


def _version_field(text: str, name: str) -> Optional[str]:
    match = re.search(rf"^{name}\b[^=\n]*=\s*['\"]([^'\"]*)['\"]", text, re.M)
    return match.group(1) if match else None


def torch_from_metadata() -> Optional[TorchInfo]:
    """torch's own version file and the NCCL wheel's dist-info name, read without importing torch.

    ``import torch`` takes seconds and importlib.metadata some 30 ms; these reads take about one
    (bench/bench_doctor.py). The NCCL wheel (nvidia-nccl-cu12 ...) sits next to torch in
    site-packages; a torch that links NCCL statically has none, and --import-torch asks torch.
    """
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return torch_from_files(Path(spec.origin).parent)


def torch_from_files(package: Path) -> Optional[TorchInfo]:
    """The versions of the torch installed in ``package`` (its directory in site-packages)."""
    try:
        text = (package / "version.py").read_text()
    except OSError:
        return None
    version = _version_field(text, "__version__")
    if version is None:
        return None
    nccl = None
    with contextlib.suppress(OSError):
        wheels = sorted(p.name for p in package.parent.glob("nvidia_nccl_cu*-*.dist-info"))
        nccl = wheels[-1].removesuffix(".dist-info").split("-")[1] if wheels else None
    return TorchInfo(version, _version_field(text, "cuda"), _version_field(text, "hip"), nccl)


def torch_from_import() -> Optional[TorchInfo]:
    try:
        import torch
    except ImportError:
        return None
    nccl = None
    if torch.cuda.is_available() or torch.version.cuda:
        try:
            raw = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            nccl = ".".join(map(str, raw)) if isinstance(raw, tuple) else str(raw)
        except Exception:  # torch built without NCCL
            nccl = None
    return TorchInfo(
        torch.__version__,
        torch.version.cuda,
        getattr(torch.version, "hip", None),
        nccl,
        torch.cuda.is_available(),
        torch.cuda.device_count(),
    )


def _int_or_none(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _nvidia(system: System) -> tuple[Optional[NvidiaInfo], Optional[Topology], Optional[str]]:
    nvml = system.nvml()
    smi = system.which("nvidia-smi")
    info, failed = read_nvidia(nvml, smi, system.run)
    if failed is not None:
        return None, None, failed
    if info is not None and info.source == "nvml":
        info = _name_processes(system, info)
    topology = None
    if info is not None and len(info.gpus) > 1 and smi:
        matrix = system.run([smi, "topo", "-m"])
        topology = parse_topology(matrix) if matrix else None
    return info, topology, None


def _name_processes(system: System, info: NvidiaInfo) -> NvidiaInfo:
    """NVML gives pids only: name them from /proc/PID/comm."""
    gpus = tuple(
        dataclasses.replace(
            gpu,
            processes=tuple(
                dataclasses.replace(p, name=p.name or system.read(f"/proc/{p.pid}/comm") or "")
                for p in gpu.processes
            ),
        )
        for gpu in info.gpus
    )
    return dataclasses.replace(info, gpus=gpus)


def _amd_gpus(system: System) -> int:
    cards = [name for name in system.listdir("/sys/class/drm") if re.fullmatch(r"card\d+", name)]
    return sum(1 for card in cards if system.read(f"/sys/class/drm/{card}/device/vendor") == _AMD_VENDOR)


def _pipe_program(pattern: Optional[str]) -> Optional[str]:
    words = pattern[1:].split() if pattern and pattern.startswith("|") else []
    return words[0] if words else None


def core_handler_installed(system: System, pattern: Optional[str]) -> Optional[bool]:
    """For ``|PROGRAM ...``: whether PROGRAM exists as this node sees it (None: not a pipe)."""
    program = _pipe_program(pattern)
    return None if program is None else system.exists(program)


def core_handler_running(system: System, pattern: Optional[str]) -> Optional[bool]:
    """For a pipe to systemd-coredump: whether its socket is there (None: not known for others)."""
    program = _pipe_program(pattern)
    if program is None or "systemd-coredump" not in program:
        return None
    return system.exists("/run/systemd/coredump")


def gather(system: System, import_torch: bool = False) -> Facts:
    pattern = system.read("/proc/sys/kernel/core_pattern")
    status = system.read("/proc/self/status") or ""
    capeff = next(
        (line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("CapEff:")), None
    )
    hostname = system.hostname()
    nvidia, topology, nvidia_error = _nvidia(system)
    return Facts(
        tools={tool: system.which(tool) for tool in TOOLS},
        euid=system.euid(),
        yama_scope=_int_or_none(system.read("/proc/sys/kernel/yama/ptrace_scope")),
        cap_sys_ptrace=capeff_has_sys_ptrace(capeff),
        in_container=system.exists("/.dockerenv") or system.exists("/run/.containerenv"),
        core_limit=Limits(*system.rlimit(resource.RLIMIT_CORE)),
        core_pattern=pattern,
        core_uses_pid=system.read("/proc/sys/kernel/core_uses_pid") == "1",
        shm=system.fs_size(str(system.path("/dev/shm"))),
        memlock=Limits(*system.rlimit(resource.RLIMIT_MEMLOCK)),
        infiniband=tuple(system.listdir("/sys/class/infiniband")),
        torch=torch_from_import() if import_torch else torch_from_metadata(),
        env={name: system.env[name] for name in ENV_NAMES if name in system.env},
        interfaces=tuple(system.interfaces()),
        hostname=hostname,
        host_addresses=system.resolve(hostname),
        amd_gpus=_amd_gpus(system),
        kfd=system.exists("/dev/kfd"),
        cmdline=system.read("/proc/cmdline"),
        cwd_writable=os.access(os.getcwd(), os.W_OK | os.X_OK),
        core_handler_installed=core_handler_installed(system, pattern),
        core_handler_running=core_handler_running(system, pattern),
        nvidia=nvidia,
        topology=topology,
        nvidia_error=nvidia_error,
    )
