"""Every verdict of the doctor, from crafted facts: the branches this machine cannot show."""

from __future__ import annotations

import resource

import pytest
from tests.doctor.factory import GIB, healthy

from rankscope.doctor import checks
from rankscope.doctor.facts import Limits, TorchInfo
from rankscope.doctor.report import Check, Status
from rankscope.net.ifname import parse_nccl, selected, unmatched
from rankscope.nvidia.nvsmi import Gpu, GpuProcess, Link, NvidiaInfo, Topology

MIB = 1024**2


def by_name(found: list[Check], name: str) -> Check:
    return next(check for check in found if check.name == name)


def test_a_healthy_node_passes_everything_it_can() -> None:
    found = checks.run_checks(healthy())
    assert {c.status for c in found} <= {Status.PASS, Status.SKIP}, [
        c for c in found if c.status not in "PASS SKIP"
    ]


@pytest.mark.parametrize(
    ("tool", "status", "fix"),
    [
        ("py-spy", Status.FAIL, "pip install py-spy"),
        ("gdb", Status.WARN, "apt-get install gdb"),
        ("pystack", Status.WARN, "pip install pystack"),
    ],
)
def test_missing_tools(tool: str, status: Status, fix: str) -> None:
    tools = dict(healthy().tools, **{tool: None})
    check = by_name(checks.tools(healthy(tools=tools)), tool)
    assert check.status == status and fix in (check.fix or "")


@pytest.mark.parametrize(
    ("scope", "cap", "container", "status", "words"),
    [
        (None, False, False, Status.PASS, "own processes"),
        (0, False, False, Status.PASS, "own processes"),
        (1, False, False, Status.WARN, "kernel.yama.ptrace_scope=0"),
        (1, True, False, Status.PASS, "CAP_SYS_PTRACE held"),
        (2, False, False, Status.FAIL, "sudo"),
        (2, True, False, Status.PASS, "CAP_SYS_PTRACE held"),
        (3, True, False, Status.FAIL, "reboot"),
        (0, False, True, Status.WARN, "--cap-add=SYS_PTRACE"),
        (2, False, True, Status.FAIL, "--cap-add=SYS_PTRACE"),
    ],
)
def test_ptrace(scope: int, cap: bool, container: bool, status: Status, words: str) -> None:
    check = checks.ptrace(healthy(yama_scope=scope, cap_sys_ptrace=cap, in_container=container))
    assert check.status == status
    assert words in check.summary + (check.fix or "")


@pytest.mark.parametrize(
    ("pattern", "uses_pid", "status", "where"),
    [
        ("core", False, Status.WARN, "only the last core survives"),
        ("core", True, Status.PASS, "working directory as core.PID"),
        ("/tmp/cores/core-%e.%p.%h.%t", False, Status.PASS, "in /tmp/cores as core-%e.%p.%h.%t"),
        ("/tmp/cores/core", False, Status.WARN, "ranks that crash in one directory write the same file"),
        (
            "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h",
            False,
            Status.PASS,
            "coredumpctl dump PID",
        ),
        ("|/usr/share/apport/apport -p%p -s%s -c%c -d%d -P%P -u%u -g%g -- %E", False, Status.WARN, "apport"),
        ("|/usr/bin/my-collector %p", False, Status.WARN, "piped to /usr/bin/my-collector"),
        (None, False, Status.WARN, "could not be read"),
    ],
)
def test_core_pattern(pattern: str, uses_pid: bool, status: Status, where: str) -> None:
    check = checks.core_dumps(healthy(core_pattern=pattern, core_uses_pid=uses_pid))
    assert check.status == status
    assert where in check.summary
    if status == Status.WARN and pattern and pattern.startswith("|"):
        assert check.fix and "kernel.core_pattern=/tmp/core-%e.%p.%h.%t" in check.fix
    if status == Status.WARN and pattern and not pattern.startswith("|"):
        assert check.fix and "kernel.core_uses_pid=1" in check.fix


@pytest.mark.parametrize(
    ("settings", "status", "words"),
    [
        ({"core_handler_installed": False}, Status.FAIL, "not installed: the kernel drops every core"),
        ({"core_handler_installed": True, "core_handler_running": False}, Status.FAIL, "is missing"),
        ({"in_container": True, "core_handler_installed": False}, Status.WARN, "on the host"),
        ({"core_handler_installed": True, "core_handler_running": True}, Status.PASS, "coredumpctl"),
    ],
)
def test_core_pipe_handler(settings: dict[str, bool], status: Status, words: str) -> None:
    pattern = "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h"
    check = checks.core_dumps(healthy(core_pattern=pattern, **settings))
    assert check.status == status
    assert words in check.summary


def test_relative_core_pattern_in_an_unwritable_directory() -> None:
    check = checks.core_dumps(healthy(core_pattern="core", core_uses_pid=True, cwd_writable=False))
    assert check.status == Status.WARN and "working directory is not writable" in check.summary


def test_core_limit_zero() -> None:
    check = checks.core_dumps(healthy(core_limit=Limits(0, resource.RLIM_INFINITY)))
    assert check.status == Status.WARN and check.fix and check.fix.startswith("ulimit -c unlimited")
    check = checks.core_dumps(healthy(core_limit=Limits(0, 0)))
    assert check.fix and "hard limit is 0" in check.fix
    apport = "|/usr/share/apport/apport %p"
    check = checks.core_dumps(healthy(core_limit=Limits(0, 0), core_pattern=apport))
    assert check.status == Status.WARN and check.fix and "core_pattern=/tmp" in check.fix


@pytest.mark.parametrize(
    ("shm", "status", "words"),
    [
        (None, Status.FAIL, "does not exist"),
        ((64 * MIB, 60 * MIB), Status.FAIL, "docker's default"),
        ((512 * MIB, 500 * MIB), Status.WARN, "a few GiB"),
        ((8 * GIB, 100 * MIB), Status.WARN, "nearly full"),
        ((8 * GIB, 8 * GIB), Status.PASS, "/dev/shm 8.0 GiB"),
    ],
)
def test_shared_memory(shm: tuple[int, int], status: Status, words: str) -> None:
    check = checks.shared_memory(healthy(shm=shm))
    assert check.status == status and words in check.summary
    if status != Status.PASS:
        assert check.fix


def test_memlock() -> None:
    limited = Limits(8 * MIB, 8 * MIB)
    assert checks.memlock(healthy(memlock=limited)).status == Status.PASS
    check = checks.memlock(healthy(memlock=limited, infiniband=("mlx5_0", "mlx5_1")))
    assert check.status == Status.FAIL and "mlx5_0" in check.summary
    assert check.fix and "ulimit -l unlimited" in check.fix and "memlock=-1" in check.fix
    assert checks.memlock(healthy(infiniband=("mlx5_0",))).status == Status.PASS


def test_hostname() -> None:
    check = checks.hostname(healthy(host_addresses=["127.0.1.1"]))
    assert check.status == Status.WARN and check.fix == (
        "export GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0 (or map gpu01 to its real address in /etc/hosts)"
    )
    both = {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}
    assert checks.hostname(healthy(host_addresses=["127.0.1.1"], env=both)).status == Status.PASS
    assert checks.hostname(healthy(host_addresses=["::1"])).status == Status.WARN
    assert checks.hostname(healthy(host_addresses=None)).status == Status.WARN
    assert checks.hostname(healthy(host_addresses=["127.0.1.1", "10.0.0.11"])).status == Status.PASS


INTERFACES = ["lo", "eth0", "eth1", "ib0", "ib1", "docker0", "enp1s0f0"]


@pytest.mark.parametrize(
    ("value", "chosen", "missing"),
    [
        ("eth", ["eth0", "eth1"], []),
        ("eth0", ["eth0"], []),
        ("=eth", [], ["eth"]),
        ("=eth1", ["eth1"], []),
        ("ib,enp", ["ib0", "ib1", "enp1s0f0"], []),
        ("^docker,lo", ["eth0", "eth1", "ib0", "ib1", "enp1s0f0"], []),
        ("^=eth0,lo", ["eth1", "ib0", "ib1", "docker0", "enp1s0f0"], []),
        ("^=eth", INTERFACES, ["eth"]),
        ("bond0,eth1", ["eth1"], ["bond0"]),
        ("mlx5_0:1", [], ["mlx5_0"]),
    ],
)
def test_nccl_socket_ifname_semantics(value: str, chosen: list[str], missing: list[str]) -> None:
    spec = parse_nccl(value)
    assert selected(spec, INTERFACES) == chosen
    assert unmatched(spec, INTERFACES) == missing


@pytest.mark.parametrize(
    ("variable", "value", "status", "words"),
    [
        ("NCCL_SOCKET_IFNAME", "eth", Status.PASS, "NCCL may use eth0"),
        (
            "NCCL_SOCKET_IFNAME",
            "bond",
            Status.FAIL,
            "matches no interface here (interfaces: lo, eth0, ib0, docker0)",
        ),
        ("NCCL_SOCKET_IFNAME", "bond0,eth0", Status.WARN, "bond0 matches no interface"),
        ("NCCL_SOCKET_IFNAME", "^lo,eth,ib,docker", Status.FAIL, "excludes every interface"),
        ("NCCL_SOCKET_IFNAME", "lo", Status.WARN, "only loopback"),
        ("GLOO_SOCKET_IFNAME", "eth0", Status.PASS, "exists"),
        ("GLOO_SOCKET_IFNAME", "eth", Status.FAIL, "eth is not an interface here"),
        ("GLOO_SOCKET_IFNAME", "eth0,enp9s0", Status.FAIL, "enp9s0 is not an interface here"),
        ("NCCL_IB_HCA", "mlx5", Status.FAIL, "matches no InfiniBand device"),
    ],
)
def test_interface_variables(variable: str, value: str, status: Status, words: str) -> None:
    (check,) = checks.interface_variables(healthy(env={variable: value}))
    assert check.name == variable and check.status == status
    assert words in check.summary
    if status == Status.FAIL:
        assert check.fix and check.fix.startswith(f"export {variable}=")


def test_ib_hca_against_devices() -> None:
    (check,) = checks.interface_variables(
        healthy(env={"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}, infiniband=("mlx5_0", "mlx5_1"))
    )
    assert check.status == Status.PASS
    (check,) = checks.interface_variables(healthy(env={"NCCL_IB_HCA": "^mlx5_0"}, infiniband=("mlx5_0",)))
    assert check.status == Status.FAIL and check.fix == "export NCCL_IB_HCA=mlx5_0"


def _gpus(n: int, **fields: object) -> NvidiaInfo:
    return NvidiaInfo("580.1", "13.0", tuple(Gpu(i, "H100", uuid=f"GPU-{i}aa", **fields) for i in range(n)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "status", "words"),
    [
        (None, Status.PASS, "all 4 GPU(s)"),
        ("", Status.FAIL, "set but empty"),
        ("0,1", Status.PASS, "2 GPU(s) visible"),
        ("0,1,1", Status.FAIL, "lists 1 twice"),
        ("0,4", Status.FAIL, "names 4, not on this node"),
        ("0,cuda:1", Status.FAIL, "'cuda:1' is not an index"),
        ("GPU-2aa,3", Status.PASS, "2 GPU(s)"),
        ("GPU-9ff", Status.FAIL, "GPU-9ff, not on this node"),
    ],
)
def test_cuda_visible_devices(value: str, status: Status, words: str) -> None:
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    check = checks.visible_devices(healthy(env=env, nvidia=_gpus(4)))
    assert check.status == status and words in check.summary


def test_cuda_visible_devices_without_gpus() -> None:
    assert checks.visible_devices(healthy()).status == Status.SKIP
    assert checks.visible_devices(healthy(env={"CUDA_VISIBLE_DEVICES": "0,1"})).status == Status.PASS


@pytest.mark.parametrize(
    ("nccl", "env", "status", "words"),
    [
        (
            "2.14.3",
            {"CUDA_LAUNCH_BLOCKING": "1"},
            Status.FAIL,
            "NCCL 2.14.3 hangs with CUDA_LAUNCH_BLOCKING=1",
        ),
        ("2.13.4", {"CUDA_LAUNCH_BLOCKING": "1"}, Status.FAIL, "NVIDIA/nccl#750"),
        ("2.21.5", {"CUDA_LAUNCH_BLOCKING": "1"}, Status.WARN, "can deadlock"),
        (None, {"CUDA_LAUNCH_BLOCKING": "1"}, Status.WARN, "can deadlock"),
        ("2.14.3", {"CUDA_LAUNCH_BLOCKING": "0"}, Status.PASS, "no known"),
        ("2.14.3", {}, Status.PASS, "no known"),
    ],
)
def test_launch_blocking_with_nccl(nccl: str, env: dict[str, str], status: Status, words: str) -> None:
    check = checks.known_issues(healthy(torch=TorchInfo("1.13.1+cu117", "11.7", nccl=nccl), env=env))
    assert check.status == status and words in check.summary


def test_launch_blocking_means_nothing_to_a_cpu_build() -> None:
    facts = healthy(torch=TorchInfo("2.13.0+cpu"), env={"CUDA_LAUNCH_BLOCKING": "1"})
    assert checks.known_issues(facts).status == Status.PASS


def test_torch_270_with_nccl_226() -> None:
    facts = healthy(torch=TorchInfo("2.7.0+cu126", "12.6", nccl="2.26.2"))
    check = checks.known_issues(facts)
    assert check.status == Status.WARN and "pytorch/pytorch#153960" in check.summary
    assert check.fix == "export TORCH_NCCL_USE_COMM_NONBLOCKING=0, or upgrade to torch 2.7.1 or later"
    fixed = healthy(
        torch=TorchInfo("2.7.0+cu126", "12.6", nccl="2.26.2"), env={"TORCH_NCCL_USE_COMM_NONBLOCKING": "0"}
    )
    assert checks.known_issues(fixed).status == Status.PASS
    assert (
        checks.known_issues(healthy(torch=TorchInfo("2.7.1+cu126", "12.6", nccl="2.26.2"))).status
        == Status.PASS
    )


def test_versions() -> None:
    assert checks.versions(healthy()).summary == "torch 2.5.1+cu124, CUDA 12.4, NCCL 2.21.5"
    assert checks.versions(healthy(torch=TorchInfo("2.13.0+cpu"))).summary == "torch 2.13.0+cpu, CPU build"
    assert checks.versions(healthy(torch=None)).status == Status.SKIP
    rocm = checks.versions(healthy(torch=TorchInfo("2.5.0+rocm6.2", hip="6.2.41133")))
    assert "ROCm/HIP 6.2.41133" in rocm.summary


def test_nvidia_gpus() -> None:
    found = checks.nvidia(healthy(nvidia=_gpus(2)))
    assert [c.status for c in found] == [Status.PASS] * 4
    assert found[0].summary == "2 x H100, driver 580.1, CUDA 13.0 (via nvidia-smi)"
    found = checks.nvidia(healthy(nvidia=_gpus(2, ecc_uncorrected_volatile=2)))
    ecc = by_name(found, "gpu-ecc")
    assert ecc.status == Status.FAIL and "nvidia-smi -r" in (ecc.fix or "")
    assert (
        by_name(checks.nvidia(healthy(nvidia=_gpus(1, ecc_uncorrected_aggregate=1))), "gpu-ecc").status
        == Status.WARN
    )
    slow = by_name(checks.nvidia(healthy(nvidia=_gpus(1, slowdowns=("hw_slowdown",)))), "gpu-clocks")
    assert slow.status == Status.WARN and "GPU0: hw_slowdown" in slow.summary
    busy = checks.nvidia(healthy(nvidia=_gpus(1, processes=(GpuProcess(77, "python", 900),))))
    assert by_name(busy, "gpu-processes").summary == "GPUs in use: GPU0: pid 77 python (900 MiB)"
    assert checks.nvidia(healthy()) == [
        Check("nvidia-gpus", Status.SKIP, "no NVIDIA driver here (no NVML, no nvidia-smi)")
    ]
    broken = checks.nvidia(healthy(nvidia_error="nvidia-smi -q -x failed"))
    assert broken[0].status == Status.FAIL


def test_topology_with_a_link_down() -> None:
    links = (Link("GPU0", "GPU1", "NV18"), Link("GPU0", "GPU2", "NV18"), Link("GPU1", "GPU2", "SYS"))
    facts = healthy(nvidia=_gpus(3), topology=Topology(("GPU0", "GPU1", "GPU2"), links, "matrix"))
    check = by_name(checks.nvidia(facts), "gpu-topology")
    assert check.status == Status.WARN and "GPU1-GPU2 SYS" in check.summary
    pcie = Topology(("GPU0", "GPU1"), (Link("GPU0", "GPU1", "PIX"),), "m")
    assert (
        by_name(checks.nvidia(healthy(nvidia=_gpus(2), topology=pcie)), "gpu-topology").status == Status.PASS
    )


@pytest.mark.parametrize(
    ("amd", "kfd", "cmdline", "status"),
    [
        (0, False, "quiet", Status.SKIP),
        (8, True, "BOOT_IMAGE=/vmlinuz ro quiet", Status.WARN),
        (8, True, "BOOT_IMAGE=/vmlinuz ro iommu=pt quiet", Status.PASS),
        (0, True, "ro amd_iommu=off", Status.PASS),
        (2, False, "ro iommu=soft", Status.PASS),
        (2, False, "ro iommu=ptx", Status.WARN),
    ],
)
def test_amd_iommu(amd: int, kfd: bool, cmdline: str, status: Status) -> None:
    check = checks.amd_iommu(healthy(amd_gpus=amd, kfd=kfd, cmdline=cmdline))
    assert check.status == status
    if status == Status.WARN:
        assert check.fix and "iommu=pt" in check.fix and "GRUB_CMDLINE_LINUX" in check.fix


@pytest.mark.parametrize(
    ("env", "status", "words"),
    [
        ({}, Status.PASS, "recent torch records by default (seen: 2.11 with NCCL and gloo, 2.13 with gloo)"),
        (
            {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": "/d/fr_"},
            Status.PASS,
            "on (TORCH_FR_BUFFER_SIZE=2000); TORCH_FR_DUMP_TEMP_FILE=/d/fr_",
        ),
        ({"TORCH_NCCL_TRACE_BUFFER_SIZE": "500"}, Status.PASS, "on (TORCH_NCCL_TRACE_BUFFER_SIZE=500)"),
        ({"TORCH_FR_BUFFER_SIZE": "0"}, Status.WARN, "the flight recorder is off (TORCH_FR_BUFFER_SIZE=0)"),
    ],
)
def test_flight_recorder(env: dict[str, str], status: Status, words: str) -> None:
    found = checks.flight_recorder(healthy(env=env))
    assert found.status == status and words in found.summary
    if status == Status.WARN:
        assert "TORCH_FR_BUFFER_SIZE=2000" in (found.fix or "")
