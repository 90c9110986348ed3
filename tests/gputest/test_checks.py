"""The set-up mistakes gpu-test catches before the backend: pure checks on crafted input.

The duplicate-GPU check cannot meet a real case here (no GPU, and one GPU on the recording node): it
is fed the device mapping of the recorded job in tests/data/gpu-h100/nccl_dup.log, in which NCCL
refused two ranks on one device, and must flag exactly those ranks before NCCL would.
"""

from __future__ import annotations

import re
from pathlib import Path

from rankscope.gputest.checks import (
    DeviceSlot,
    check_hostname_address,
    check_interface_variables,
    check_master_address,
    duplicate_devices,
)

DUP_LOG = Path(__file__).resolve().parents[1] / "data" / "gpu-h100" / "nccl_dup.log"
HERE = ["lo", "eth0", "ib0"]


def test_an_interface_variable_naming_no_interface_names_the_variable_and_what_exists() -> None:
    (problem,) = check_interface_variables({"GLOO_SOCKET_IFNAME": "nosuch0"}, HERE)
    assert "GLOO_SOCKET_IFNAME=nosuch0" in problem.what
    assert "lo, eth0, ib0" in problem.what
    assert "GLOO_SOCKET_IFNAME" in problem.fix


def test_existing_interfaces_and_nccl_prefixes_and_exclusions_pass() -> None:
    env = {"GLOO_SOCKET_IFNAME": "eth0,ib0", "NCCL_SOCKET_IFNAME": "eth", "TP_SOCKET_IFNAME": "ib0"}
    assert check_interface_variables(env, HERE) == []
    assert check_interface_variables({"NCCL_SOCKET_IFNAME": "^docker,lo"}, HERE) == []


def test_nccl_exact_match_and_gloo_do_not_take_prefixes() -> None:
    assert check_interface_variables({"NCCL_SOCKET_IFNAME": "=eth"}, HERE)
    assert check_interface_variables({"GLOO_SOCKET_IFNAME": "eth"}, HERE)
    (problem,) = check_interface_variables({"NCCL_SOCKET_IFNAME": "eth0,bond0"}, HERE)
    assert "names bond0," in problem.what


def test_an_nccl_exclusion_that_leaves_no_interface_is_a_problem() -> None:
    (problem,) = check_interface_variables({"NCCL_SOCKET_IFNAME": "^lo,eth,ib"}, HERE)
    assert "NCCL_SOCKET_IFNAME=^lo,eth,ib" in problem.what


def test_master_address_on_loopback_only_matters_across_nodes() -> None:
    multi = {"MASTER_ADDR": "localhost", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    (problem,) = check_master_address(multi, ["127.0.0.1", "::1"])
    assert "MASTER_ADDR=localhost" in problem.what and "loopback" in problem.what
    assert check_master_address(multi, ["10.0.0.1"]) == []
    assert check_master_address({**multi, "LOCAL_WORLD_SIZE": "4"}, ["127.0.0.1"]) == []
    assert check_master_address(multi, []) == []  # does not resolve: the store step says so


def test_a_hostname_on_loopback_breaks_gloo_across_nodes_unless_the_interface_is_named() -> None:
    multi = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    (problem,) = check_hostname_address(multi, "gloo", "node1", ["127.0.1.1"])
    assert "GLOO_SOCKET_IFNAME" in problem.fix
    assert (
        check_hostname_address({**multi, "GLOO_SOCKET_IFNAME": "eth0"}, "gloo", "node1", ["127.0.1.1"]) == []
    )
    assert check_hostname_address(multi, "nccl", "node1", ["127.0.1.1"]) == []
    assert check_hostname_address(multi, "gloo", "node1", ["10.0.0.1"]) == []


def test_two_ranks_on_one_device_are_found_as_in_the_recorded_nccl_refusal() -> None:
    refusal = re.search(
        r"Duplicate GPU detected : rank (\d+) and rank (\d+) both on CUDA device", DUP_LOG.read_text()
    )
    assert refusal, "the recording shows NCCL refusing two ranks on one GPU"
    ranks = sorted(int(r) for r in refusal.groups())
    # What that job did: every rank on cuda:0 of the one host.
    slots = [DeviceSlot("vm", rank, "GPU-0") for rank in ranks]
    (problem,) = duplicate_devices(slots)
    assert ranks == [0, 1] and "ranks 0-1 all use device GPU-0 on vm" in problem.what
    assert "LOCAL_RANK" in problem.fix


def test_one_device_per_rank_or_per_host_is_fine() -> None:
    slots = [DeviceSlot("n1", 0, "GPU-a"), DeviceSlot("n1", 1, "GPU-b"), DeviceSlot("n2", 2, "GPU-a")]
    assert duplicate_devices(slots) == []
