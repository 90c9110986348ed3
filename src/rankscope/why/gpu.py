"""A node's GPUs as `why` shows them beside a rank blocked on its GPU (pure): utilisation and memory
(`stacks`' query), ECC errors and the processes on each GPU (the one GPU reader, rankscope.nvidia:
NVML, else `nvidia-smi -q -x`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from rankscope.why.report import GpuFacts

if TYPE_CHECKING:
    from rankscope.nvidia.nvsmi import NvidiaInfo
    from rankscope.stacks.report import GpuStatus


def from_status(gpus: Sequence[GpuStatus]) -> list[GpuFacts]:
    return [
        GpuFacts(g.host, g.index, g.name, g.utilization, g.memory_used_mib, source=g.source) for g in gpus
    ]


def with_details(facts: list[GpuFacts], info: NvidiaInfo, host: str) -> list[GpuFacts]:
    """``facts`` with each GPU's uncorrected ECC count and the pids on it; GPUs only the XML names added."""
    by_index = {f.index: f for f in facts}
    for gpu in info.gpus:
        ecc = gpu.ecc_uncorrected_volatile
        pids = [p.pid for p in gpu.processes]
        known = by_index.get(gpu.index)
        if known is None:
            by_index[gpu.index] = GpuFacts(
                host, gpu.index, gpu.name, None, gpu.memory_used_mib, ecc, pids, info.source
            )
        else:
            by_index[gpu.index] = replace(known, ecc_uncorrected=ecc, pids=pids)
    return [by_index[i] for i in sorted(by_index)]
