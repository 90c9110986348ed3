"""Nodes in network namespaces: a real sshd over veth, a black-holed node, a closed port."""

from __future__ import annotations

import re

import pytest
from tests.support.cluster_fixtures import NetnsCluster


def test_black_hole_costs_its_deadline_and_closed_port_is_unreachable(netns_cluster: NetnsCluster) -> None:
    hosts = ["--hosts", "sshnode,blackhole,closed"]
    result = netns_cluster.run_via("exec", "--node-timeout", "10", *hosts, "--", "echo from $RANKSCOPE_NODE")
    assert result.returncode == 4, result.stdout + result.stderr
    out = result.stdout
    assert "sshnode (1)" in out and "from sshnode" in out
    assert "Failed nodes (2 of 3):" in out
    assert "blackhole  unreachable: never answered within 10s" in out
    assert "closed  unreachable: " in out and "Connection refused" in out


@pytest.mark.needs("pdsh")
def test_overall_deadline_bounds_a_black_hole(netns_cluster: NetnsCluster) -> None:
    result = netns_cluster.run_via(
        "exec", "--node-timeout", "30", "--deadline", "10", "--json", "--hosts", "sshnode,blackhole", "--", "true",
        via="pdsh",
    )  # fmt: skip
    assert result.returncode == 4, result.stdout + result.stderr
    stages = {n["node"]: (n["stage"], n["reason"]) for n in result.json()["nodes"]}
    assert stages["sshnode"] == ("ok", "")
    stage, reason = stages["blackhole"]
    # Its budget is what was left of the 10 s deadline when it started (9.99s on a loaded machine).
    within = re.fullmatch(r"never answered within ([0-9.]+)s", reason)
    assert stage == "unreachable" and within and 0 < float(within[1]) <= 10, reason
