"""`net check` among eight namespace nodes names exactly one bad node and one bad link, nothing else.

Nodes n1-n8 (tests/support/netfabric.py, each with its own sshd). On the checked port n5's firewall
drops everything (a bad node), and n2 and n8 drop each other's packets (a bad link, both ways: every
other link of n2 and n8 works). The four-node tests (test_net_netns.py) cover a bad node and a
one-way rule; this is the pair that cannot talk at all, hidden among links that work, and the
finding must not spread to n2's or n8's good links.
"""

from __future__ import annotations

import pytest
from tests.support.cluster_fixtures import REMOTE_RANKSCOPE
from tests.support.netfabric import build_fabric
from tests.support.system import ensure_tools

pytestmark = pytest.mark.needs("netns", "ssh")

PORT = 6125
NODES = tuple(f"n{i}" for i in range(1, 9))
BAD_NODE, BAD_LINK = "n5", ("n2", "n8")


def test_check_names_the_bad_node_and_the_bad_link_alone(tmp_path_factory: pytest.TempPathFactory) -> None:
    ensure_tools("netns", "ssh")
    fabric = build_fabric(NODES, tmp_path_factory.mktemp("fabric8"))
    try:
        fabric.drop(BAD_NODE, str(PORT))
        fabric.drop(BAD_LINK[0], str(PORT), source=BAD_LINK[1])
        fabric.drop(BAD_LINK[1], str(PORT), source=BAD_LINK[0])
        argv = fabric.check_argv(NODES, PORT, 3, REMOTE_RANKSCOPE)
        result = fabric.run("router", *argv, "--json", timeout=120)
    finally:
        fabric.delete()
    assert result.returncode == 4, result.stdout + result.stderr
    document = result.json()
    assert document["matrix"]["silent"] == {}
    bad = {(c["source"], c["target"]): c["verdict"] for c in document["matrix"]["cells"]
           if c["source"] != c["target"] and c["verdict"] != "open"}  # fmt: skip
    one, other = BAD_LINK
    expected = {(s, BAD_NODE): "filtered" for s in NODES if s != BAD_NODE}
    expected |= {(one, other): "filtered", (other, one): "filtered"}
    assert bad == expected
    findings = document["findings"]
    assert [f["problem"].split(": ")[0] for f in findings] == [
        f"no node reaches {BAD_NODE}:{PORT} (filtered)",
        f"{one} -> {other}:{PORT} filtered",
        f"{other} -> {one}:{PORT} filtered",
    ]
    assert [len(f["links"]) for f in findings] == [7, 1, 1]
