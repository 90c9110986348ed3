"""The GPUs of this node, as NVML or nvidia-smi sees them: utilisation and memory.

Asked only when a rank waits for its GPU (rankscope.stacks.local): a kernel that never ends
keeps its GPU at 100%. Read by the one GPU reader (:mod:`rankscope.nvidia`, shared with doctor):
NVML (the ``pynvml`` module of nvidia-ml-py) when it is installed, else ``nvidia-smi -q -x``;
without either there is nothing to add and the report says nothing about the GPU beyond the stacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from rankscope.stacks.report import GpuStatus

if TYPE_CHECKING:  # the reader is imported when a rank waits for its GPU, not with every `stacks`
    from rankscope.nvidia.nvsmi import NvidiaInfo

#: Seconds nvidia-smi may take here (it can hang on a wedged driver; the report waits for it).
SMI_TIMEOUT = 5.0


def gpu_statuses(info: NvidiaInfo, host: str) -> list[GpuStatus]:
    """One status per GPU of ``info`` (pure)."""
    source = "NVML" if info.source == "nvml" else "nvidia-smi"
    return [
        GpuStatus(
            host=host,
            index=gpu.index,
            name=gpu.name,
            utilization=gpu.utilization_pct,
            memory_used_mib=gpu.memory_used_mib,
            memory_total_mib=gpu.memory_total_mib,
            source=source,
        )
        for gpu in info.gpus
    ]


def query_gpus(host: str) -> Optional[list[GpuStatus]]:
    """This node's GPUs from NVML, else nvidia-smi; None when neither answers."""
    import shutil

    from rankscope import lifetime
    from rankscope.nvidia.read import import_nvml, read_nvidia

    smi = shutil.which("nvidia-smi")
    info, _failed = read_nvidia(import_nvml(), smi, lambda argv: lifetime.output(list(argv), SMI_TIMEOUT))
    return (gpu_statuses(info, host) or None) if info is not None else None
