"""The nvidia-smi parsers on real output recorded on an H100 node (tests/data/gpu-h100/).

The recording stands in for a GPU that does not exist on the machine running the tests; crafted
variants of it (an uncorrectable ECC error, a thermal slowdown, a leftover process, an older
driver's element names, a 4-GPU NVLink matrix with one link down) reach the other branches.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from rankscope.nvidia.nvsmi import parse_query_xml, parse_topology

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu-h100"
XML = (DATA / "nvidia-smi-q.xml").read_text()


def test_recorded_xml_agrees_with_the_recorded_query() -> None:
    info = parse_query_xml(XML)
    rows = list(csv.reader((DATA / "query.csv").read_text().splitlines(), skipinitialspace=True))
    header, row = rows[0], rows[1]
    query = dict(zip(header, row))
    assert info.driver == query["driver_version"] == "580.159.04"
    assert info.cuda == "13.0"
    (gpu,) = info.gpus
    assert gpu.index == int(query["index"])
    assert gpu.name == query["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu.uuid == query["uuid"]
    assert gpu.bus_id == query["pci.bus_id"]
    assert f"{gpu.memory_total_mib} MiB" == query["memory.total [MiB]"]
    assert f"{gpu.memory_used_mib} MiB" == query["memory.used [MiB]"]
    assert f"{gpu.sm_clock_mhz} MHz" == query["clocks.current.sm [MHz]"]
    assert f"{gpu.utilization_pct} %" == query["utilization.gpu [%]"]
    assert str(gpu.temperature_c) == query["temperature.gpu"]
    assert str(gpu.ecc_uncorrected_volatile) == query["ecc.errors.uncorrected.volatile.total"] == "0"
    assert gpu.max_sm_clock_mhz == 1980
    assert gpu.slowdowns == ()  # gpu_idle is active in the recording, and benign
    assert gpu.processes == () and gpu.reset_pending is False


def test_crafted_ecc_error_slowdown_and_process() -> None:
    xml = (
        XML.replace(
            "<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>3</dram_uncorrectable>", 1
        )
        .replace(
            "<clocks_event_reason_hw_thermal_slowdown>Not Active<",
            "<clocks_event_reason_hw_thermal_slowdown>Active<",
        )
        .replace("<remapped_row_pending>No<", "<remapped_row_pending>Yes<")
        .replace(
            "<processes>\n\t\t</processes>",
            "<processes><process_info><gpu_instance_id>N/A</gpu_instance_id><pid>4242</pid><type>C</type>"
            "<process_name>python3</process_name><used_memory>1234 MiB</used_memory></process_info></processes>",
        )
    )
    (gpu,) = parse_query_xml(xml).gpus
    assert gpu.ecc_uncorrected_volatile == 3 and gpu.ecc_uncorrected_aggregate == 0
    assert gpu.reset_pending
    assert gpu.slowdowns == ("hw_thermal_slowdown",)
    assert [(p.pid, p.name, p.used_mib) for p in gpu.processes] == [(4242, "python3", 1234)]


def test_older_driver_throttle_names() -> None:
    xml = XML.replace("clocks_event_reason", "clocks_throttle_reason").replace(
        "<clocks_throttle_reason_sw_power_cap>Not Active<", "<clocks_throttle_reason_sw_power_cap>Active<"
    )
    assert parse_query_xml(xml).gpus[0].slowdowns == ("sw_power_cap",)


def test_not_nvidia_smi_xml() -> None:
    with pytest.raises(ValueError, match="not nvidia-smi XML"):
        parse_query_xml("<html/>")
    with pytest.raises(ValueError, match="not nvidia-smi XML"):
        parse_query_xml("No devices were found")


def test_recorded_one_gpu_topology_has_no_links() -> None:
    topology = parse_topology((DATA / "topo.txt").read_text())
    assert topology.gpus == ("GPU0",)
    assert topology.links == ()
    assert "\x1b" not in topology.text and topology.text.startswith("\tGPU0")


FOUR_GPUS = (
    "\x1b[4m\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    + "\n".join(
        f"GPU{i}\t"
        + "\t".join("X" if i == j else ("SYS" if {i, j} == {1, 2} else "NV18") for j in range(4))
        + "\tPIX\t0-15\t0\t\tN/A"
        for i in range(4)
    )
    + "\nNIC0\tPIX\tPIX\tPIX\tPIX\t X\n\nLegend:\n\n  X    = Self\n"
)


def test_crafted_matrix_links_each_pair_once() -> None:
    topology = parse_topology(FOUR_GPUS)
    assert topology.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert len(topology.links) == 6
    assert [(link.a, link.b) for link in topology.links if link.kind == "SYS"] == [("GPU1", "GPU2")]
