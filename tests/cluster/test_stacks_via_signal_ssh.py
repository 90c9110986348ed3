"""`rankscope stacks --hosts ... --via-signal` over real sshd nodes against a real hung 2-node torchrun job
started with RANKSCOPE_INPROC=1 TORCH_FR_BUFFER_SIZE=2000: each node takes its ranks' stacks through their
in-process handlers (the flag travels in the node's command line), each rank's step comes back with it,
and so do the ranks' flight-recorder entries, which this side aligns across nodes (one node alone cannot
tell which of the other node's ranks never arrived)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.cluster_fixtures import client_env
from tests.support.multinode_job import MultiNodeJob, multinode_job, write_node_dispatch
from tests.support.sshd import Sshd

from rankscope.inproc import runtime


@pytest.fixture(scope="module")
def inproc_two_node_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiNodeJob]:
    # Ranks 0-1 on node01, 2-3 on node02; rank r marks step r+1; rank 3 loops, the others wait in a barrier.
    workdir = tmp_path_factory.mktemp("job")
    env = {"RANKSCOPE_INPROC": "1", "TORCH_FR_BUFFER_SIZE": "2000", runtime.ENV_DIR: str(workdir / "rt")}
    with multinode_job(workdir, ["node01", "node02"], scenario="steps", culprit=3, extra_env=env) as job:
        yield job


@pytest.mark.slow
def test_via_signal_across_nodes(sshd_nodes: Sshd, inproc_two_node_job: MultiNodeJob, tmp_path: Path) -> None:
    dispatch = write_node_dispatch(tmp_path / "rankscope-on-node", inproc_two_node_job.workdir)
    cluster = [
        "--via", "ssh", "--ssh-config", str(sshd_nodes.ssh_config), "--hosts", "node[01-02]",
        "--remote-rankscope", str(dispatch), "--node-python",  # the nodes share one /proc
        # A rank's first recorder dump with Python frames imports part of torch's compiler stack into it:
        # seconds on a loaded 2-core machine, so the default 10 s per dump is too short here.
        "--timeout", "40",
    ]  # fmt: skip
    result = run_cli("stacks", *cluster, "--json", "--via-signal", env=client_env(), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    document = result.json()
    processes = {(p["rank"]["host"], p["rank"]["rank"]): p for p in document["processes"]}
    assert set(processes) == {("node01", 0), ("node01", 1), ("node02", 2), ("node02", 3)}
    assert all(p["via"] == "signal" for p in processes.values())
    assert {key[1]: p["progress"]["step"] for key, p in processes.items()} == {0: 1, 1: 2, 2: 3, 3: 4}
    assert document["diagnosis"]["divergent_ranks"] == [3]
    waiting = document["diagnosis"]["findings"][0]
    assert waiting["steps"] == {"1": "rank 0 on node01", "2": "rank 1 on node01", "3": "rank 2 on node02"}

    # The recorders of both nodes, aligned here: rank 3 (node02) never issued the barrier; rank 2 beside it did.
    assert "fr_records" not in document  # the nodes' entries stay between the nodes and this side
    fr = document["fr"]
    assert fr["rank_list"] == [0, 1, 2, 3] and fr["absent"] == []
    assert fr["divergences"][0]["suspects"] == [3], fr["headline"]
    assert "rank 3 never issued barrier #2 from wait_for_peers (hang_job.py:" in fr["headline"]
    out = run_cli("stacks", *cluster, env=client_env(), timeout=180).stdout  # py-spy on every node
    assert out.index("Collective desync (flight recorder)") < out.index("Diagnosis"), out
    assert fr["headline"] in out
