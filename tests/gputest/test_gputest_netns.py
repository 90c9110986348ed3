"""Two "nodes" in network namespaces joined by a veth pair, one gpu-test rank on each.

This machine's name resolves to 127.0.0.1 (/etc/hosts), the classic multi-node trap: without
GLOO_SOCKET_IFNAME each node would advertise loopback to the other and the job would hang. With the
interface named the job passes; without it gpu-test ends at once with the fix. Each rank is started
with the launcher variables srun or mpirun would set (rank 0 hosts the store at MASTER_ADDR), without
a launcher process: what is tested is the ranks across the link, and a torchrun per node would only
add its own start-up (torchrun's agent store is what the one-node `--nproc` tests use).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from tests.support.netns import TwoNodes, veth_pair_nodes

from rankscope.net.ifname import is_loopback

pytestmark = [pytest.mark.slow, pytest.mark.needs("netns")]


@pytest.fixture
def two_nodes() -> Iterator[TwoNodes]:
    with veth_pair_nodes() as nodes:
        yield nodes


def start_rank(nodes: TwoNodes, index: int, port: int, timeout: int, **env: str) -> subprocess.Popen[str]:
    """Rank ``index`` of 2, one per node, as a launcher without an agent starts it (rank 0 hosts the store)."""
    node_env = {k: v for k, v in os.environ.items() if not k.endswith("_SOCKET_IFNAME")}
    node_env.update(
        OMP_NUM_THREADS="1", RANK=str(index), LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR=nodes.addresses[0], MASTER_PORT=str(port), **env,
    )  # fmt: skip
    argv = nodes.argv(index, [
        sys.executable, "-m", "rankscope", "gpu-test", "--backend", "gloo", "--timeout", str(timeout),
    ])  # fmt: skip
    return subprocess.Popen(argv, env=node_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(processes: list[subprocess.Popen[str]], limit: float) -> tuple[list[str], float]:
    began = time.monotonic()
    outputs = []
    try:
        for process in processes:
            out, _ = process.communicate(timeout=max(1.0, limit - (time.monotonic() - began)))
            outputs.append(out)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return outputs, time.monotonic() - began


def test_gpu_test_passes_across_namespaces_with_the_interface_named(two_nodes: TwoNodes) -> None:
    nodes = [
        start_rank(two_nodes, i, 29511, 60, GLOO_SOCKET_IFNAME=two_nodes.interfaces[i]) for i in range(2)
    ]
    (first, second), _ = finish(nodes, 240)
    assert nodes[0].returncode == 0 and nodes[1].returncode == 0, first + second
    assert ":0] OK gloo cpu" in first, first
    assert ":1] OK gloo cpu" in second, second
    assert "gpu-test: all 2 ranks OK" in first


def test_without_the_interface_a_loopback_hostname_ends_at_once_naming_the_fix(two_nodes: TwoNodes) -> None:
    addresses = {str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)}
    if not all(is_loopback(a) for a in addresses):
        pytest.skip("this node's name does not resolve to loopback")
    timeout = 20
    nodes = [start_rank(two_nodes, i, 29512, timeout) for i in range(2)]
    outputs, _ = finish(nodes, timeout + 120)
    for output in outputs:
        assert "FAILED at config: this node's name" in output, output
        assert "(loopback) and GLOO_SOCKET_IFNAME is not set" in output
        assert "set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to the interface" in output
    assert all(node.returncode != 0 for node in nodes)
