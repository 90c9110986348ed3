"""`rankscope stacks --hosts ...` over real sshd nodes against a real hung 2-node torchrun job started with
TORCH_FR_BUFFER_SIZE=2000 RANKSCOPE_INPROC=1 and no code change: each node's answer carries its ranks'
flight-recorder entries, and this side aligns the ranks of every node (one node alone cannot tell which
of the other node's ranks never arrived)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.cluster_fixtures import client_env
from tests.support.multinode_job import MultiNodeJob, start_multinode_job, write_node_dispatch
from tests.support.sshd import Sshd

from rankscope.inproc import runtime


@pytest.fixture(scope="module")
def fr_two_node_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiNodeJob]:
    # Ranks 0-1 on node01, 2-3 on node02; rank 3 sleeps in its data loader, the others wait in a barrier.
    workdir = tmp_path_factory.mktemp("job")
    job = start_multinode_job(
        workdir,
        ["node01", "node02"],
        scenario="skip-barrier",
        culprit=3,
        extra_env={
            "RANKSCOPE_INPROC": "1",
            "TORCH_FR_BUFFER_SIZE": "2000",
            runtime.ENV_DIR: str(workdir / "rt"),
        },
    )
    try:
        job.wait_ready()
        yield job
    finally:
        job.stop()


@pytest.mark.slow
def test_the_head_aligns_the_recorders_of_every_node(
    sshd_nodes: Sshd, fr_two_node_job: MultiNodeJob, tmp_path: Path
) -> None:
    dispatch = write_node_dispatch(tmp_path / "rankscope-on-node", fr_two_node_job.workdir)
    cluster = [
        "--via", "ssh", "--ssh-config", str(sshd_nodes.ssh_config), "--hosts", "node[01-02]",
        "--remote-rankscope", str(dispatch),
    ]  # fmt: skip
    result = run_cli("stacks", *cluster, "--json", env=client_env(), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    document = result.json()
    assert "fr_records" not in document  # the nodes' entries stay between the nodes and this side
    fr = document["fr"]
    assert fr["rank_list"] == [0, 1, 2, 3] and fr["absent"] == []
    first = fr["divergences"][0]
    assert first["suspects"] == [3], fr["headline"]  # rank 2, beside it on node02, did arrive
    text = run_cli("stacks", *cluster, env=client_env(), timeout=180)
    out = text.stdout
    assert out.index("Collective desync (flight recorder)") < out.index("Diagnosis"), out
    assert fr["headline"] in out
