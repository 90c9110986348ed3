"""`rankscope logs nccl` on NCCL_DEBUG=INFO output.

There is no GPU (so no NCCL) on the test machine: the logs under data/ are written by hand in
NCCL's documented debug-line format (``host:pid:tid [cudaDev] NCCL INFO|WARN ...``), using the
messages NCCL 2.18/2.19 print (NET/IB and NET/Socket selection, channel transports, IB
completion errors, socket connect timeouts).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli

from rankscope.logs.nccl import NcclScan

DATA = Path(__file__).parent / "data"


def test_ib_completion_error_12_is_explained() -> None:
    result = run_cli("logs", "nccl", str(DATA / "nccl_ib_fail.log"), "--json")
    assert result.returncode == 0, result.stderr
    data = result.json()
    assert data["schema"] == "rankscope.logs.nccl/1"
    ranks = {r["who"]: r for r in data["ranks"]}
    assert set(ranks) == {"node-1:0", "node-2:1"}
    assert ranks["node-1:0"]["version"] == "2.18.1+cuda12.1"
    assert ranks["node-1:0"]["network"] == "IB"
    assert ranks["node-1:0"]["ib_devices"] == ["ibP111p0s0", "rdmaP1111p0s2"]
    assert ranks["node-1:0"]["ib_links"] == ["IB", "RoCE"]
    assert ranks["node-1:0"]["oob_interface"] == "eth0"
    assert ranks["node-1:0"]["transports"] == {"NET/IB": 2}
    kinds = [f["kind"] for f in data["findings"]]
    assert kinds[:2] == ["ib_completion_12", "unhandled_system_error"]
    ib = data["findings"][0]
    assert "retries exceeded" in ib["cause"]
    assert "status 12 (vendor err 129; 2x, ranks 0-1)" in ib["message"]
    assert [e["at"] for e in ib["evidence"]] == [
        f"{DATA / 'nccl_ib_fail.log'}:18",
        f"{DATA / 'nccl_ib_fail.log'}:22",
    ]
    assert "not connected" in ib["next_step"] and "GID" in ib["next_step"]
    assert sorted(ib["who"]) == ["node-1:0", "node-2:1"]


def test_socket_fallback_mismatched_interfaces_versions_and_warns() -> None:
    result = run_cli("logs", "nccl", str(DATA / "nccl_socket_mixed.log"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "process(es) send NCCL traffic over TCP sockets (NET/Socket) between nodes" in out
    assert "ranks chose different network interfaces (docker0: gpu018:2; enp67s0: gpu017:[0-1])" in out
    assert "different NCCL versions across ranks: 2.18.1+cuda12.1, 2.19.3+cuda12.3" in out
    # each process's version line is the evidence, the rarest version first
    log = DATA / "nccl_socket_mixed.log"
    assert f"    lines: {log}:20, {log}:5, {log}:11, {log}:16" in out
    # two failed connects that differ only in port numbers are one finding, with cause and fix
    assert out.count("connect_failed: connections failed: Connection timed out (2x, to 192.168.50.21") == 1
    assert "NCCL WARN (" not in out


def test_nccl_scan_transports_per_process() -> None:
    scan = NcclScan()
    scan.feed((DATA / "nccl_socket_mixed.log").read_bytes())
    result = scan.result()
    by_rank = {p.rank: p for p in result.ranks}
    assert dict(by_rank[0].transports) == {"P2P": 1, "NET/Socket": 1}
    assert dict(by_rank[2].transports) == {"SHM": 1}
    assert by_rank[2].socket_interfaces == ["docker0"]


def test_log_without_nccl_lines_says_how_to_get_them(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text("[n1:0]:hello\n")
    result = run_cli("logs", "nccl", str(path))
    assert result.returncode == 3
    assert "NCCL_DEBUG=INFO" in result.stderr


def test_ib_status_4_and_5_have_their_own_explanations() -> None:
    scan = NcclScan()
    scan.feed(
        b"n1:10:11 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> "
        b"with error 4, opcode 0, len 0, vendor err 81 (Recv)\n"
        b"n1:10:11 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> "
        b"with error 5, opcode 0, len 0, vendor err 244 (Recv)\n"
    )
    findings = {f.kind: f for f in scan.result().findings}
    assert "local protection error" in findings["ib_completion_4"].cause
    assert "nvidia-peermem" in findings["ib_completion_4"].next_step
    assert "flushed" in findings["ib_completion_5"].cause
    assert "a consequence, not the cause" in findings["ib_completion_5"].next_step
