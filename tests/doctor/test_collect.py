"""What the doctor reads, from a crafted node: files under a temporary root, an environment, commands.

The readers of rankscope.doctor.system are the only way the doctor sees the node; here each one is
given crafted input (an AMD GPU in /sys/class/drm, a kernel command line, core_pattern, CapEff,
InfiniBand devices, nvidia-smi answering with the recording from an H100 node) and the checks run
on what was gathered.
"""

from __future__ import annotations

import resource
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from rankscope.doctor.checks import run_checks
from rankscope.doctor.facts import TorchInfo, gather, torch_from_files
from rankscope.doctor.report import Status
from rankscope.doctor.system import System
from rankscope.nvidia.nvml import read_nvml

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu-h100"
MIB = 1024**2


def crafted_root(tmp: Path) -> Path:
    files = {
        "proc/cmdline": "BOOT_IMAGE=/vmlinuz-6.8 root=/dev/nvme0n1p2 ro quiet splash\n",
        "proc/sys/kernel/core_pattern": "|/usr/share/apport/apport -p%p -s%s -c%c -d%d -P%P -u%u -g%g -- %E\n",
        "proc/sys/kernel/core_uses_pid": "0\n",
        "proc/sys/kernel/yama/ptrace_scope": "1\n",
        "proc/self/status": "Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t0000000000000000\n",
        "sys/class/drm/card0/device/vendor": "0x1002\n",
        "sys/class/drm/card1/device/vendor": "0x10de\n",
        "sys/class/drm/renderD128/device/vendor": "0x1002\n",
        "sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
        "dev/kfd": "",
    }
    for name, text in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp


def crafted_system(root: Path, **changes: Any) -> System:
    limits = {resource.RLIMIT_CORE: (0, 0), resource.RLIMIT_MEMLOCK: (64 * 1024, 64 * 1024)}
    recorded = {"-q": (DATA / "nvidia-smi-q.xml").read_text(), "topo": (DATA / "topo.txt").read_text()}

    def run(argv: Sequence[str]) -> Optional[str]:
        assert argv[0] == "/usr/bin/nvidia-smi"
        return recorded[argv[1]]

    fields: dict[str, Any] = dict(
        root=root,
        env={"NCCL_SOCKET_IFNAME": "bond", "HOME": "/root", "SECRET_TOKEN": "x"},
        which=lambda tool: "/usr/bin/nvidia-smi" if tool == "nvidia-smi" else None,
        run=run,
        fs_size=lambda path: (64 * MIB, 64 * MIB) if path == str(root / "dev/shm") else None,
        rlimit=lambda which: limits[which],
        hostname=lambda: "gpu07",
        resolve=lambda name: ["127.0.1.1"],
        interfaces=lambda: ["lo", "enp1s0", "ib0"],
        euid=lambda: 1000,
        nvml=lambda: None,
    )
    fields.update(changes)
    return System(**fields)


def test_everything_wrong_on_a_crafted_node(tmp_path: Path) -> None:
    facts = gather(crafted_system(crafted_root(tmp_path)))
    assert facts.amd_gpus == 1 and facts.kfd  # card0 only: card1 is NVIDIA, renderD128 is not a card
    assert facts.yama_scope == 1 and not facts.cap_sys_ptrace
    assert facts.infiniband == ("mlx5_0",)
    assert facts.env == {"NCCL_SOCKET_IFNAME": "bond"}  # nothing else of the environment is kept
    assert facts.nvidia is not None and facts.nvidia.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert facts.topology is None  # one GPU: no topology asked
    status = {check.name: check.status for check in run_checks(facts)}
    assert status == {
        "py-spy": Status.FAIL,
        "gdb": Status.WARN,
        "strace": Status.WARN,
        "pystack": Status.WARN,
        "ptrace": Status.WARN,
        "core-dumps": Status.FAIL,  # piped to apport, which this node lacks
        "/dev/shm": Status.FAIL,
        "memlock": Status.FAIL,
        "hostname": Status.WARN,
        "NCCL_SOCKET_IFNAME": Status.FAIL,
        "CUDA_VISIBLE_DEVICES": Status.PASS,
        "torch": status["torch"],  # this Python's own torch: whatever is installed
        "known-hangs": Status.PASS,
        "flight-recorder": Status.PASS,
        "nvidia-gpus": Status.PASS,
        "gpu-ecc": Status.PASS,
        "gpu-clocks": Status.PASS,
        "gpu-processes": Status.PASS,
        "amd-iommu": Status.WARN,
    }


def test_driver_that_does_not_answer(tmp_path: Path) -> None:
    system = crafted_system(crafted_root(tmp_path), run=lambda argv: None)
    checks = {c.name: c for c in run_checks(gather(system))}
    assert checks["nvidia-gpus"].status == Status.FAIL
    assert "Xid" in (checks["nvidia-gpus"].fix or "")


def test_an_empty_root_reads_as_unknown_not_as_an_error(tmp_path: Path) -> None:
    facts = gather(crafted_system(tmp_path, which=lambda tool: None))
    assert facts.yama_scope is None and facts.core_pattern is None and facts.cmdline is None
    assert facts.amd_gpus == 0 and not facts.kfd and facts.nvidia is None


class FakeNvml(SimpleNamespace):
    """The functions of pynvml that rankscope calls, answering for two GPUs; GPU 1 has no ECC support."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self) -> None:
        super().__init__(shutdown=False)

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=81920 * MIB, used=1024 * MIB)

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        if handle == 1:
            raise RuntimeError("NVMLError_NotSupported")
        return 5 if counter == self.NVML_VOLATILE_ECC else 7

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        return 1410

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        return 1410

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 40

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=99, usedGpuMemory=512 * MIB)] if handle == 0 else []

    def nvmlSystemGetDriverVersion(self) -> str:
        return "535.104.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020


def test_nvml_reader() -> None:
    nvml = FakeNvml()
    info = read_nvml(nvml)
    assert info is not None and nvml.shutdown
    assert (info.driver, info.cuda, info.source) == ("535.104.05", "12.2", "nvml")
    first, second = info.gpus
    assert first.name == "NVIDIA A100-SXM4-80GB" and first.memory_total_mib == 81920
    assert first.ecc_uncorrected_volatile == 5 and first.ecc_uncorrected_aggregate == 7
    assert second.ecc_uncorrected_volatile is None  # not supported is unknown, not zero and not a crash
    assert [(p.pid, p.used_mib) for p in first.processes] == [(99, 512)]


def test_nvml_processes_are_named_from_proc(tmp_path: Path) -> None:
    (tmp_path / "proc" / "99").mkdir(parents=True)
    (tmp_path / "proc" / "99" / "comm").write_text("pt_main_thread\n")
    facts = gather(crafted_system(tmp_path, nvml=FakeNvml))
    assert facts.nvidia is not None and facts.nvidia.source == "nvml"
    assert facts.nvidia.gpus[0].processes[0].name == "pt_main_thread"
    busy = next(c for c in run_checks(facts) if c.name == "gpu-processes")
    assert busy.status == Status.WARN and busy.summary == "GPUs in use: GPU0: pid 99 pt_main_thread (512 MiB)"
    ecc = next(c for c in run_checks(facts) if c.name == "gpu-ecc")
    assert ecc.status == Status.FAIL and "5 uncorrectable ECC error(s)" in ecc.summary


def test_nvml_without_a_driver() -> None:
    class NoDriver:
        def nvmlInit(self) -> None:
            raise RuntimeError("NVMLError_LibraryNotFound")

    assert read_nvml(NoDriver()) is None


def test_versions_from_torch_files_and_the_nccl_wheel(tmp_path: Path) -> None:
    package = tmp_path / "site-packages" / "torch"
    package.mkdir(parents=True)
    (package / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.5.1+cu124'\ndebug = False\n"
        "cuda: Optional[str] = '12.4'\nhip: Optional[str] = None\n"
    )
    (tmp_path / "site-packages" / "nvidia_nccl_cu12-2.21.5.dist-info").mkdir()
    assert torch_from_files(package) == TorchInfo("2.5.1+cu124", cuda="12.4", nccl="2.21.5")
    (package / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda = None\n")
    (tmp_path / "site-packages" / "nvidia_nccl_cu12-2.21.5.dist-info").rmdir()
    assert torch_from_files(package) == TorchInfo("2.13.0+cpu")
    assert torch_from_files(tmp_path / "nowhere") is None
