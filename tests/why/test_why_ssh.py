"""`rankscope why --hosts` over real sshd nodes (127.0.0.1) against a real 2-node torchrun job.

One rank per node: rank 1 (node02) raises while a thread of its own keeps it alive, rank 0 (node01)
waits in a barrier. Neither node alone can tell: node01 sees one rank waiting, node02 a traceback
of a rank that is not in a collective; the head joins both (each node answers `why --local --json`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cluster_fixtures import REMOTE_SETUP, run_via
from tests.support.multinode_job import MultiNodeJob, multinode_job, write_node_dispatch
from tests.support.sshd import Sshd

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crashed_two_node_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiNodeJob]:
    workdir = tmp_path_factory.mktemp("job")
    with multinode_job(
        workdir, ["node01", "node02"], nproc_per_node=1, scenario="crash-hang", culprit=1
    ) as job:
        log = job.workdir / "node02.log"
        for _ in range(600):
            if b"RuntimeError: bad batch" in log.read_bytes():
                break
            time.sleep(0.2)
        yield job


def test_why_across_nodes_joins_what_each_node_sees(
    sshd_nodes: Sshd, crashed_two_node_job: MultiNodeJob, tmp_path: Path
) -> None:
    dispatch = write_node_dispatch(tmp_path / "rankscope-on-node", crashed_two_node_job.workdir)
    result = run_via(
        sshd_nodes, "why", "--json", "--hosts", "node[01-02],closedport", "--remote-rankscope", str(dispatch),
        "--remote-setup", REMOTE_SETUP, "--node-timeout", "60", timeout=180,
    )  # fmt: skip
    assert result.returncode == 15, result.stdout + result.stderr
    document = result.json()
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("python_exception", [1])
    assert verdict["location"].startswith("train_step (hang_job.py:")
    assert verdict["evidence"][0]["source"].startswith("node02: ")
    assert any(e["source"] == "stacks" and "waits in barrier" in e["text"] for e in verdict["evidence"])
    states = {s["ranks"]: (s["state"], s["hosts"]) for s in document["ranks"]}
    assert states["0"][0].startswith("waits in barrier") and states["0"][1] == ["node01"]
    stages = {n["node"]: n["stage"] for n in document["nodes"]}
    assert stages == {"node01": "ok", "node02": "ok", "closedport": "unreachable"}
    assert [f["target"] for f in document["failures"]] == ["closedport"]
    text = run_via(
        sshd_nodes, "why", "--hosts", "node[01-02]", "--remote-rankscope", str(dispatch),
        "--remote-setup", REMOTE_SETUP, "--node-timeout", "60", timeout=180,
    )  # fmt: skip
    assert text.returncode == 15, text.stdout + text.stderr
    assert text.stdout.splitlines()[2] == "Verdict: rank 1 raised RuntimeError: bad batch on rank 1 at step 1"
