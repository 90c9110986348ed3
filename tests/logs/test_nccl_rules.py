"""`rankscope logs nccl`: NCCL 2.28's real lines, and each known failure with its cause and fix.

NCCL cannot run here (no GPU; the CPU torch has no NCCL), so a fresh NCCL message cannot be
produced in a test. The NCCL 2.28.9 lines come from real recordings on an H100 node
(tests/data/gpu-h100/, see its README). Where no recording exists, a test writes the lines it needs
in NCCL's real format and says in a comment where that form is quoted from. The gloo interface
error is produced for real: a 2-rank torchrun job on gloo with GLOO_SOCKET_IFNAME=nosuch0.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import run_torchrun

from rankscope.logs.nccl import NcclScan
from rankscope.logs.nccl_host import HostFacts, read_host_facts
from rankscope.logs.nccl_rules import RULES
from rankscope.logs.prefixes import SourceLabels
from rankscope.ranks import short_hostname

GPU = Path(__file__).parents[1] / "data" / "gpu-h100"
JOBS = Path(__file__).parent / "jobs"


def _scan(text: str, host: HostFacts | None = None, source: str = "job.log") -> dict[str, object]:
    scan = NcclScan()
    scan.feed(text.encode(), source=source)
    return {f.kind: f for f in scan.result(host).findings}


# ----------------------------------------------------------------------------- real NCCL 2.28.9


def test_healthy_nccl_228_log_reads_channels_rings_comm_and_init() -> None:
    result = run_cli("logs", "nccl", str(GPU / "nccl_one.log"), "--json")
    assert result.returncode == 0, result.stderr
    data = result.json()
    (rank,) = data["ranks"]
    assert rank["who"] == "gpu0:0"
    assert (rank["rank"], rank["nranks"]) == (0, 1)
    assert rank["version"] == "2.28.9+cuda13.0"
    assert rank["network"] == "Socket"
    assert rank["socket_interfaces"] == ["eth0"]
    assert rank["ib_devices"] == []  # "NET/IB : Using [RO]; OOB eth0" lists no HCA
    assert rank["channels"] == 64
    assert rank["ring"] == "0"
    assert rank["tree"] == "-1/-1/-1->0->-1"
    assert (rank["cuda_dev"], rank["bus_id"], rank["init"]) == (0, "60", "COMPLETE")
    assert rank["comm_id"] == "0x694e3161959259c2"
    assert data["findings"] == []
    text = run_cli("logs", "nccl", str(GPU / "nccl_one.log")).stdout
    header, row = text.splitlines()[1:3]
    assert header.split() == [
        "who",
        "rank",
        "NCCL",
        "network",
        "interface",
        "channels",
        "transports",
        "GPU",
        "init",
    ]
    assert row.split() == [
        "gpu0:0",
        "0/1",
        "2.28.9+cuda13.0",
        "Socket",
        "eth0",
        "64",
        "-",
        "cuda:0",
        "bus",
        "60",
        "COMPLETE",
    ]
    assert "no findings" in text


def test_two_ranks_on_one_gpu_is_explained_with_lines() -> None:
    log = GPU / "nccl_dup.log"
    result = run_cli("logs", "nccl", str(log), "--json")
    assert result.returncode == 0, result.stderr
    data = result.json()
    assert [f["kind"] for f in data["findings"]] == ["duplicate_gpu"]  # no generic "warn" left
    (dup,) = data["findings"]
    assert dup["ranks"] == [0, 1]
    assert dup["who"] == ["gpu0:0", "gpu0:1"]
    assert dup["message"] == "ranks 0-1 share one GPU (busId 60) on vm"
    assert "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))" in dup["next_step"]
    assert "opened the same GPU" in dup["cause"]
    # NCCL's two WARNs, then each rank's comm line with the one busId
    assert [e["at"] for e in dup["evidence"]] == [f"{log}:27", f"{log}:81", f"{log}:23", f"{log}:77"]
    lines = log.read_text().splitlines()
    told = [lines[int(e["at"].rsplit(":", 1)[1]) - 1] for e in dup["evidence"]]
    assert all("Duplicate GPU detected" in line for line in told[:2])
    assert all("busId 60 commId 0x1da7773cee28bf32 - Init START" in line for line in told[2:])
    assert [r["init"] for r in data["ranks"]] == ["START", "START"]
    text = run_cli("logs", "nccl", str(log)).stdout
    assert "[1] duplicate_gpu: ranks 0-1 share one GPU (busId 60) on vm" in text
    assert f"    lines: {log}:27, {log}:81, {log}:23, {log}:77" in text
    assert "troubleshooting guide" not in text


def test_two_ranks_on_one_gpu_from_comm_info_alone() -> None:
    """The real log without NCCL's WARN (NCCL_DEBUG=INFO of a build that does not check): same busId, same commId."""
    text = "".join(
        line
        for line in (GPU / "nccl_dup.log").read_text().splitlines(keepends=True)
        if "Duplicate GPU" not in line
    )
    found = _scan(text)
    assert list(found) == ["duplicate_gpu"]
    assert found["duplicate_gpu"].ranks == [0, 1]  # type: ignore[attr-defined]
    starts = [n for n, line in enumerate(text.splitlines(), 1) if "busId 60" in line and "Init START" in line]
    assert len(starts) == 2
    assert [e.at for e in found["duplicate_gpu"].evidence] == [f"job.log:{n}" for n in starts]  # type: ignore[attr-defined]


def test_ib_present_on_this_host_but_socket_used() -> None:
    """The real healthy log read on a host with an HCA, and on the recording host (rdma_cm only)."""
    text = (GPU / "nccl_one.log").read_text()
    with_hca = _scan(text, HostFacts("vm", ("eth0", "lo"), ("mlx5_0",), has_uverbs=True))
    assert list(with_hca) == ["ib_unused"]
    assert "vm has /dev/infiniband/uverbs*" in with_hca["ib_unused"].message  # type: ignore[attr-defined]
    assert "NCCL_IB_DISABLE" in with_hca["ib_unused"].next_step  # type: ignore[attr-defined]
    assert _scan(text, HostFacts("vm", ("eth0", "lo"), (), has_uverbs=False)) == {}
    # read elsewhere: this host's devices say nothing about the node that wrote the log
    assert _scan(text, HostFacts("login1", ("eth0",), ("mlx5_0",), has_uverbs=True)) == {}


# ----------------------------------------------------------------------------- interface variables


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_gloo_socket_ifname_that_matches_nothing_real_job(tmp_path: Path) -> None:
    """A real gloo job with GLOO_SOCKET_IFNAME=nosuch0: gloo's own error, explained. One rank is
    enough: gloo looks the interface up when it makes its device, before any peer is reached."""
    host = short_hostname()
    log = tmp_path / "job.log"
    code = run_torchrun(
        tmp_path,
        log,
        script=JOBS / "gloo_allreduce.py",
        timeout=120,
        nproc=1,
        torchrun_args=["--role", f"{host}:", "--tee", "3"],
        env={**os.environ, "GLOO_SOCKET_IFNAME": "nosuch0"},
    )
    text = log.read_text(errors="replace")
    assert code != 0, text[-2000:]
    assert "Unable to find address for: nosuch0" in text  # what torch's gloo prints
    result = run_cli("logs", "nccl", str(log), "--json")
    assert result.returncode == 0, result.stderr
    (found,) = result.json()["findings"]
    assert found["kind"] == "interface_not_found"
    assert found["message"].startswith(f"GLOO_SOCKET_IFNAME=nosuch0 matches no network interface on {host} (")
    existing = sorted(name for _index, name in socket.if_nameindex())
    assert f"interfaces on {host}: {', '.join(existing)}" in found["message"]
    assert found["next_step"].startswith("set GLOO_SOCKET_IFNAME to an interface that exists")
    assert found["evidence"] and all(e["at"].startswith(f"{log}:") for e in found["evidence"])
    assert all("Unable to find address for: nosuch0" in e["line"] for e in found["evidence"])


# The two lines below are quoted from a real NCCL log (DeepSpeed on rcvlab-A6000x4-0); NCCL's source
# prints them from ncclFindInterfaces (INFO, ENV) and bootstrapNetInit (WARN).
SOCKET_IFNAME_LOG = """\
gpu01:223645:223645 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth9

gpu01:223645:223645 [0] bootstrap.cc:45 NCCL WARN Bootstrap : no socket interface found
gpu01:223645:223645 [0] NCCL INFO init.cc:82 -> 3
"""


def test_nccl_socket_ifname_names_variable_value_and_interfaces_here() -> None:
    found = _scan(SOCKET_IFNAME_LOG, HostFacts("gpu01", ("eth0", "ib0", "lo")))
    assert list(found) == ["interface_not_found"]
    item = found["interface_not_found"]
    assert item.message == (  # type: ignore[attr-defined]
        "NCCL_SOCKET_IFNAME=eth9 matches no network interface on gpu01 (gpu01 pid 223645); "
        "interfaces on gpu01: eth0, ib0, lo"
    )
    assert item.evidence[0].at == "job.log:3"  # type: ignore[attr-defined]
    assert "NCCL_SOCKET_IFNAME names the interfaces" in item.cause  # type: ignore[attr-defined]
    # read on another machine: only what the log shows
    elsewhere = _scan(SOCKET_IFNAME_LOG, HostFacts("login1", ("enp1s0",)))
    assert "interfaces on" not in elsewhere["interface_not_found"].message  # type: ignore[attr-defined]


def test_nccl_socket_ifname_lists_interfaces_the_log_shows() -> None:
    """Another node of the same job found its interface: its NET/Socket line (NCCL 2.28 form) names it."""
    other = "gpu02:300:300 [0] NCCL INFO NET/Socket : Using [0]enp67s0:192.168.50.22<0>\n"
    found = _scan(SOCKET_IFNAME_LOG + other)
    assert found["interface_not_found"].message.endswith(  # type: ignore[attr-defined]
        "; interfaces NCCL used on other nodes: enp67s0"
    )


def test_nccl_ib_hca_that_matches_no_device() -> None:
    # "NCCL_IB_HCA set to %s" is NCCL's INFO in ncclIbInit (net_ib.cc); "NET/IB : No device found."
    # as recorded in tests/data/gpu-h100/nccl_one.log.
    log = (
        "gpu01:10:10 [0] NCCL INFO NCCL_IB_HCA set to mlx5_9\n"
        "gpu01:10:10 [0] NCCL INFO NET/IB : No device found.\n"
        "gpu01:10:10 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
        "gpu01:10:10 [0] NCCL INFO Using network Socket\n"
    )
    host = HostFacts("gpu01", ("eth0",), ("mlx5_0", "mlx5_1"), has_uverbs=True)
    found = _scan(log, host)
    assert found["interface_not_found"].message == (  # type: ignore[attr-defined]
        "NCCL_IB_HCA=mlx5_9 matches no InfiniBand device on gpu01 (gpu01 pid 10); "
        "on gpu01: mlx5_0, mlx5_1 (/sys/class/infiniband)"
    )
    assert "ib_unused" in found
    # without the variable, "No device found." is just a node without IB
    assert "interface_not_found" not in _scan(
        log.replace("NCCL_IB_HCA set to mlx5_9", "cudaDriverVersion 13000")
    )


def test_host_facts_read_from_sys_and_dev(tmp_path: Path) -> None:
    (tmp_path / "sys/class/infiniband/mlx5_1").mkdir(parents=True)
    (tmp_path / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    (tmp_path / "dev/infiniband").mkdir(parents=True)
    (tmp_path / "dev/infiniband/rdma_cm").touch()
    facts = read_host_facts(tmp_path)
    assert facts.ib_devices == ("mlx5_0", "mlx5_1")
    assert not facts.has_uverbs  # rdma_cm alone is not an HCA (the H100 recording host had only it)
    (tmp_path / "dev/infiniband/uverbs0").touch()
    assert read_host_facts(tmp_path).has_uverbs
    assert "lo" in read_host_facts(tmp_path).interfaces


# ----------------------------------------------------------------------------- other known failures


def test_shared_memory_too_small() -> None:
    # Quoted from a real container log (misc/shmutils.cc, NCCL 2.1x); newer NCCL appends ", error: ..."
    log = (
        "3d3e22c3066f:168:168 [0] misc/shmutils.cc:72 NCCL WARN Error: failed to extend "
        "/dev/shm/nccl-UbzKZ9 to 9637892 bytes\n"
        "3d3e22c3066f:168:168 [0] misc/shmutils.cc:113 NCCL WARN Error while creating shared memory segment "
        "/dev/shm/nccl-UbzKZ9 (size 9637888)\n"
        "3d3e22c3066f:168:168 [0] NCCL INFO transport/shm.cc:114 -> 2\n"
    )
    found = _scan(log)
    assert list(found) == ["shm_too_small"]
    assert "(9.6 MB)" in found["shm_too_small"].message  # type: ignore[attr-defined]
    assert "--shm-size" in found["shm_too_small"].next_step  # type: ignore[attr-defined]
    assert [e.at for e in found["shm_too_small"].evidence] == ["job.log:1", "job.log:2"]  # type: ignore[attr-defined]


def test_connection_refused_and_failed_connects() -> None:
    # "Call to connect returned Connection refused, retrying" (INFO) as quoted in ESPnet's docs;
    # "socketStartConnect: Connect to ... failed : No route to host" in misc/socket.cc's form.
    log = (
        "h04e04357:542:1085 [0] NCCL INFO Call to connect returned Connection refused, retrying\n"
        "h04e04357:542:1085 [0] NCCL INFO Call to connect returned Connection refused, retrying\n"
        "node2:77:90 [1] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 192.168.80.156<51890> "
        "failed : No route to host\n"
    )
    found = _scan(log)
    assert sorted(found) == ["connect_failed", "connection_refused"]
    assert found["connection_refused"].message.startswith("connections refused (2x")  # type: ignore[attr-defined]
    assert "No route to host (1x, to 192.168.80.156" in found["connect_failed"].message  # type: ignore[attr-defined]


def test_peer_access_not_supported() -> None:
    # The WARN as quoted from real multi-GPU PCIe runs (transport/shm.cc:590, NCCL 2.2x).
    log = (
        "[default1]:ws01:4412:4470 [1] transport/shm.cc:590 NCCL WARN Cuda failure 217 "
        "'peer access is not supported between these two devices'\n"
    )
    scan = NcclScan()
    scan.feed(log.encode(), SourceLabels(), "job.log")
    (found,) = scan.result().findings
    assert found.kind == "p2p_unsupported"
    assert found.who == ["1"]  # torchrun's [default1]: is local rank 1, host unknown
    assert "NCCL_P2P_DISABLE=1" in found.next_step
    assert "CUDA_VISIBLE_DEVICES" in found.cause


def test_watchdog_timeout_and_remote_error_name_their_ranks() -> None:
    # Both lines quoted from real torch logs (ProcessGroupNCCL.cpp, torch 2.x with NCCL 2.20).
    log = (
        "[rank1]:[E810 03:04:11.061727749 ProcessGroupNCCL.cpp:683] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=78, OpType=BROADCAST, NumelIn=80, NumelOut=80, "
        "Timeout(ms)=600000) ran for 600096 milliseconds before timing out.\n"
        "[rank2]:[E810 03:04:10.939039900 ProcessGroupNCCL.cpp:683] [Rank 2] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=78, OpType=BROADCAST, NumelIn=80, NumelOut=80, "
        "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n"
        "[rank3]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 3] Process group watchdog thread terminated with "
        "exception: NCCL error: remote process exited or there was a network error, NCCL version 2.20.5\n"
    )
    scan = NcclScan()
    scan.feed(log.encode(), SourceLabels(), "job.log")
    found = {f.kind: f for f in scan.result().findings}
    assert sorted(found) == ["remote_error", "watchdog_timeout"]
    assert found["watchdog_timeout"].message == "collectives timed out on ranks 1-2: BROADCAST SeqNum=78"
    assert found["watchdog_timeout"].ranks == [1, 2]
    assert found["remote_error"].ranks == [3]
    assert "logs errors" in found["remote_error"].next_step


def test_line_numbers_hold_across_chunks_and_sources() -> None:
    lines = [f"noise {i}\n" for i in range(10)]
    lines[3] = (
        "n1:1:1 [0] misc/shmutils.cc:113 NCCL WARN Error while creating shared memory segment /dev/shm/x (size 10)\n"
    )
    lines[8] = lines[3]
    data = "".join(lines).encode()
    scan = NcclScan()
    cut = data.index(b"noise 6")
    scan.feed(data[:cut], source="a.log")
    scan.feed(data[cut:], source="a.log")
    scan.feed(data, source="b.log")
    scan.feed(
        b"noise\n[rank1]:RuntimeError: [enforce fail at device.cc:84] ifa != nullptr. Unable to find address for: x0\n",
        source="b.log",
    )
    found = {f.kind: f for f in scan.result().findings}
    shm, gloo = found["shm_too_small"], found["interface_not_found"]
    assert [e.at for e in shm.evidence] == ["a.log:4", "a.log:9", "b.log:4", "b.log:9"]
    assert [e.at for e in gloo.evidence] == ["b.log:12"]


def test_every_rule_has_cause_and_fix_and_a_docs_row() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "logs.md").read_text()
    for rule in RULES.values():
        assert rule.cause and rule.fix and rule.looks_for
        assert f"`{rule.id}" in docs, rule.id


def test_help_names_the_known_failures_with_examples() -> None:
    result = run_cli("logs", "nccl", "--help")
    assert result.returncode == 0
    assert "two ranks on one GPU" in result.stdout
    assert "rankscope logs nccl job.log --json | jq" in result.stdout
