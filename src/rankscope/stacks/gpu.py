"""The GPUs of this node, as NVML or nvidia-smi sees them: utilisation and memory.

Asked only when a rank waits for its GPU (rankscope.stacks.local): a kernel that never ends
keeps its GPU at 100%. NVML (the ``pynvml`` module of nvidia-ml-py) is used when it is
installed, else ``nvidia-smi --query-gpu ... --format=csv``; without either there is nothing to
add and the report says nothing about the GPU beyond the stacks.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Optional

from rankscope.stacks.report import GpuStatus

#: The columns asked of nvidia-smi (read back by their header names, so extra columns do no harm).
QUERY = ("index", "name", "utilization.gpu", "memory.used", "memory.total")
#: Seconds nvidia-smi may take (it can hang on a wedged driver).
SMI_TIMEOUT = 5.0

_UNIT = re.compile(r"\s*\[[^\]]*\]$")
_NUMBER = re.compile(r"\d+")


def query_argv(smi: str) -> list[str]:
    return [smi, "--query-gpu=" + ",".join(QUERY), "--format=csv"]


def _number(text: str) -> Optional[int]:
    match = _NUMBER.match(text.strip())
    return int(match.group()) if match else None  # "[N/A]", "[Not Supported]" -> None


def parse_query_csv(text: str, host: str) -> list[GpuStatus]:
    """``nvidia-smi --query-gpu=... --format=csv`` output (header line first) -> one status per GPU."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [_UNIT.sub("", column.strip()) for column in lines[0].split(",")]
    gpus = []
    for line in lines[1:]:
        row = dict(zip(header, (value.strip() for value in line.split(","))))
        index = _number(row.get("index", ""))
        if index is None:
            continue
        gpus.append(
            GpuStatus(
                host=host,
                index=index,
                name=row.get("name", ""),
                utilization=_number(row.get("utilization.gpu", "")),
                memory_used_mib=_number(row.get("memory.used", "")),
                memory_total_mib=_number(row.get("memory.total", "")),
                source="nvidia-smi",
            )
        )
    return gpus


def _from_nvml(host: str) -> Optional[list[GpuStatus]]:
    import importlib

    try:
        nvml: Any = importlib.import_module("pynvml")  # nvidia-ml-py, optional
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError: no driver, no GPU
        return None
    try:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuStatus(
                    host=host,
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    utilization=int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                    memory_used_mib=int(memory.used) >> 20,
                    memory_total_mib=int(memory.total) >> 20,
                    source="NVML",
                )
            )
        return gpus
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def query_gpus(host: str) -> Optional[list[GpuStatus]]:
    """This node's GPUs from NVML, else nvidia-smi; None when neither answers."""
    gpus = _from_nvml(host)
    if gpus is not None:
        return gpus
    import shutil
    import subprocess

    from rankscope import lifetime

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = lifetime.run(query_argv(smi), SMI_TIMEOUT, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    if done.returncode != 0 or done.timed_out:
        return None
    return parse_query_csv(done.text(), host) or None
