"""This node's NVIDIA GPUs: NVML where the ``pynvml`` module (nvidia-ml-py) is installed, else
``nvidia-smi -q -x``, through injectable readers (doctor's tests hand in stand-ins)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

from rankscope.nvidia.nvml import read_nvml
from rankscope.nvidia.nvsmi import NvidiaInfo, parse_query_xml

#: Seconds nvidia-smi may take (it can hang on a wedged driver).
SMI_TIMEOUT = 10.0


def import_nvml() -> Optional[Any]:
    """The ``pynvml`` module, None when nvidia-ml-py is not installed."""
    try:
        import pynvml  # type: ignore[import-not-found]  # nvidia-ml-py, optional
    except ImportError:
        return None
    return pynvml


def run_smi(argv: Sequence[str]) -> Optional[str]:
    """nvidia-smi's stdout, None when it fails or runs past :data:`SMI_TIMEOUT`."""
    from rankscope import lifetime

    return lifetime.output(list(argv), SMI_TIMEOUT)


def read_nvidia(
    nvml: Optional[Any],
    smi: Optional[str],
    run: Callable[[Sequence[str]], Optional[str]] = run_smi,
) -> tuple[Optional[NvidiaInfo], Optional[str]]:
    """(the GPUs, None) from ``nvml`` (the pynvml module) or the ``smi`` executable run by ``run``;
    (None, why) when nvidia-smi answers nothing readable; (None, None) with neither."""
    info = read_nvml(nvml) if nvml is not None else None
    if info is not None or not smi:
        return info, None
    xml = run([smi, "-q", "-x"])
    if xml is None:
        return None, "nvidia-smi -q -x failed (driver not loaded, or no GPU)"
    try:
        return parse_query_xml(xml), None
    except ValueError as exc:
        return None, str(exc)
