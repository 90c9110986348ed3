"""NVIDIA GPUs as ``nvidia-smi -q -x`` and ``nvidia-smi topo -m`` print them (pure parsers).

tests/doctor/test_nvsmi.py reads real outputs recorded on an H100 node (tests/data/gpu-h100/).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_mib: Optional[int] = None


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str = ""
    bus_id: str = ""
    memory_total_mib: Optional[int] = None
    memory_used_mib: Optional[int] = None
    #: Uncorrectable ECC errors since the driver loaded (volatile) and over the board's life (aggregate).
    ecc_uncorrected_volatile: Optional[int] = None
    ecc_uncorrected_aggregate: Optional[int] = None
    #: A row remap or page retirement waits for a GPU reset.
    reset_pending: bool = False
    sm_clock_mhz: Optional[int] = None
    max_sm_clock_mhz: Optional[int] = None
    temperature_c: Optional[int] = None
    #: Active clock slowdowns other than idle and application settings (thermal, power brake, HW).
    slowdowns: tuple[str, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    #: Percent of the last sample period a kernel ran (a kernel that never ends keeps it at 100).
    utilization_pct: Optional[int] = None


@dataclass(frozen=True)
class NvidiaInfo:
    driver: str
    cuda: str
    gpus: tuple[Gpu, ...]
    #: "nvml" or "nvidia-smi".
    source: str = "nvidia-smi"


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    #: ``NV18``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``.
    kind: str


@dataclass(frozen=True)
class Topology:
    gpus: tuple[str, ...]
    links: tuple[Link, ...]
    #: The matrix as printed (escape sequences removed), for the report's detail.
    text: str


_NUMBER = re.compile(r"-?\d+")
#: Reasons a clock is low that say nothing bad about the GPU.
_BENIGN_SLOWDOWNS = ("gpu_idle", "applications_clocks_setting", "display_clocks_setting", "sync_boost")


def _int(node: Optional[ET.Element], path: str) -> Optional[int]:
    text = node.findtext(path) if node is not None else None
    match = _NUMBER.search(text or "")
    return int(match.group()) if match else None


def _sum(node: Optional[ET.Element], tags: tuple[str, ...]) -> Optional[int]:
    values = [_int(node, tag) for tag in tags]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


#: Drivers before ~R535 write single_bit/double_bit totals; newer ones split SRAM and DRAM.
_UNCORRECTABLE = (
    "dram_uncorrectable",
    "sram_uncorrectable",
    "sram_uncorrectable_parity",
    "sram_uncorrectable_secded",
    "double_bit/total",
)


def _slowdowns(gpu: ET.Element) -> tuple[str, ...]:
    # clocks_event_reasons (recent drivers) or clocks_throttle_reasons (older ones).
    active = []
    for group in (gpu.find("clocks_event_reasons"), gpu.find("clocks_throttle_reasons")):
        for child in list(group) if group is not None else []:
            reason = re.sub(r"^clocks_(?:event|throttle)_reason_", "", child.tag)
            if (child.text or "").strip() == "Active" and reason not in _BENIGN_SLOWDOWNS:
                active.append(reason)
    return tuple(active)


def _processes(gpu: ET.Element) -> tuple[GpuProcess, ...]:
    found = []
    for proc in gpu.findall("processes/process_info"):
        pid = _int(proc, "pid")
        if pid is not None:
            found.append(
                GpuProcess(pid, (proc.findtext("process_name") or "").strip(), _int(proc, "used_memory"))
            )
    return tuple(found)


def parse_query_xml(text: str) -> NvidiaInfo:
    """``nvidia-smi -q -x``. ValueError when it is not that document."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"not nvidia-smi XML: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not nvidia-smi XML: root element {root.tag}")
    gpus = []
    for position, gpu in enumerate(root.findall("gpu")):
        remap_pending = (gpu.findtext("remapped_rows/remapped_row_pending") or "").strip() == "Yes"
        retire_pending = (gpu.findtext("retired_pages/pending_retirement") or "").strip() == "Yes"
        minor = _int(gpu, "minor_number")
        gpus.append(
            Gpu(
                index=position if minor is None else minor,
                name=(gpu.findtext("product_name") or "").strip(),
                uuid=(gpu.findtext("uuid") or "").strip(),
                bus_id=gpu.get("id", ""),
                memory_total_mib=_int(gpu, "fb_memory_usage/total"),
                memory_used_mib=_int(gpu, "fb_memory_usage/used"),
                ecc_uncorrected_volatile=_sum(gpu.find("ecc_errors/volatile"), _UNCORRECTABLE),
                ecc_uncorrected_aggregate=_sum(gpu.find("ecc_errors/aggregate"), _UNCORRECTABLE),
                reset_pending=remap_pending or retire_pending,
                sm_clock_mhz=_int(gpu, "clocks/sm_clock"),
                max_sm_clock_mhz=_int(gpu, "max_clocks/sm_clock"),
                temperature_c=_int(gpu, "temperature/gpu_temp"),
                slowdowns=_slowdowns(gpu),
                processes=_processes(gpu),
                utilization_pct=_int(gpu, "utilization/gpu_util"),
            )
        )
    return NvidiaInfo(
        driver=(root.findtext("driver_version") or "").strip(),
        cuda=(root.findtext("cuda_version") or "").strip(),
        gpus=tuple(gpus),
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topology(text: str) -> Topology:
    """``nvidia-smi topo -m``: the GPU-to-GPU links of the matrix (NICs and affinity columns ignored)."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if line.strip().startswith("GPU0")), None)
    if header_at is None:
        return Topology((), (), "")
    columns = lines[header_at].split()
    gpu_columns = [name for name in columns if re.fullmatch(r"GPU\d+", name)]
    links: list[Link] = []
    body = [lines[header_at]]
    for line in lines[header_at + 1 :]:
        if not line.strip():
            break
        body.append(line)
        cells = line.split()
        row = cells[0]
        if not re.fullmatch(r"GPU\d+", row):
            continue
        for column, kind in zip(gpu_columns, cells[1 : 1 + len(gpu_columns)]):
            if column != row and kind != "X" and (column, row) not in {(link.a, link.b) for link in links}:
                links.append(Link(row, column, kind))
    return Topology(tuple(gpu_columns), tuple(links), "\n".join(body))
