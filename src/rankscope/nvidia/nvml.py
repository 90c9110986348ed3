"""NVIDIA GPUs through NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``), when it is installed.

The same :class:`NvidiaInfo` as the nvidia-smi parser, without starting a process. Every call is
guarded: NVML raises for what a device does not support (ECC on consumer boards), and that is a
missing value, not a failure.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from rankscope.nvidia.nvsmi import Gpu, GpuProcess, NvidiaInfo

_MIB = 1024 * 1024


def _call(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``, or ``None`` when NVML says the value is not available."""
    try:
        return function(*args)
    except Exception:  # pynvml.NVMLError and its many subclasses: the value is unknown
        return None


def _int(value: Any) -> Optional[int]:
    return int(value) if value is not None else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_nvml(nvml: Any) -> Optional[NvidiaInfo]:
    """``nvml``: the pynvml module (a stand-in in tests). ``None`` when NVML does not start (no driver)."""
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, _DriverNotLoaded ...: no NVIDIA driver here
        return None
    try:
        gpus = tuple(_gpu(nvml, index) for index in range(nvml.nvmlDeviceGetCount()))
        driver = _text(_call(nvml.nvmlSystemGetDriverVersion) or "")
        cuda = _call(nvml.nvmlSystemGetCudaDriverVersion)
        cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else ""
        return NvidiaInfo(driver, cuda_text, gpus, source="nvml")
    finally:
        _call(nvml.nvmlShutdown)


def _gpu(nvml: Any, index: int) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = _call(nvml.nvmlDeviceGetMemoryInfo, handle)
    uncorrected = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    procs = _call(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    return Gpu(
        index=index,
        name=_text(_call(nvml.nvmlDeviceGetName, handle) or ""),
        uuid=_text(_call(nvml.nvmlDeviceGetUUID, handle) or ""),
        memory_total_mib=memory.total // _MIB if memory is not None else None,
        memory_used_mib=memory.used // _MIB if memory is not None else None,
        ecc_uncorrected_volatile=_int(
            _call(nvml.nvmlDeviceGetTotalEccErrors, handle, uncorrected, nvml.NVML_VOLATILE_ECC)
        ),
        ecc_uncorrected_aggregate=_int(
            _call(nvml.nvmlDeviceGetTotalEccErrors, handle, uncorrected, nvml.NVML_AGGREGATE_ECC)
        ),
        sm_clock_mhz=_int(_call(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)),
        max_sm_clock_mhz=_int(_call(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM)),
        temperature_c=_int(_call(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)),
        processes=tuple(
            GpuProcess(int(p.pid), "", int(p.usedGpuMemory) // _MIB if p.usedGpuMemory else None)
            for p in procs
        ),
        utilization_pct=_int(_call(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
    )
