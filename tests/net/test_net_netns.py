"""Nodes in network namespaces: probes that go unanswered or have no route, listen + probe both ways, `net check` over ssh.

Four "nodes" (n1-n4, 10.232.N.2; tests/support/netfabric.py) reach each other through a router
namespace, each with its own sshd. On the checked port, n3 drops everything that comes in (a
firewall: probes get no answer) and n4 drops only what comes from n1 (a one-way rule). Every
address used here exists only inside these namespaces.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.cluster_fixtures import REMOTE_RANKSCOPE
from tests.support.netfabric import Fabric, build_fabric
from tests.support.netns import ip
from tests.support.system import ensure_tools

pytestmark = pytest.mark.needs("netns", "ssh")

PORT = 6123
NODES = ("n1", "n2", "n3", "n4")


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    ensure_tools("netns", "ssh")
    net = build_fabric(NODES, tmp_path_factory.mktemp("fabric"))
    try:
        net.iptables("n3", "-A", "INPUT", "-p", "tcp", "--dport", str(PORT), "-j", "DROP")
        net.iptables(
            "n4", "-A", "INPUT", "-s", net.addresses["n1"], "-p", "tcp", "--dport", str(PORT), "-j", "DROP"
        )
        ip("route", "add", "unreachable", "10.232.99.0/24", netns=net.namespaces["n1"])
        ip("route", "add", "blackhole", "10.232.98.0/24", netns=net.namespaces["n1"])
        yield net
    finally:
        net.delete()


def test_probe_tells_open_refused_and_filtered_apart(fabric: Fabric) -> None:
    ssh = f"{fabric.addresses['n2']}:22"
    closed = f"{fabric.addresses['n2']}:{PORT}"
    dropped = f"{fabric.addresses['n3']}:{PORT}"
    no_route, black_hole = "10.232.99.1:1", "10.232.98.1:1"  # n1's unreachable and blackhole routes
    result = fabric.run(
        "n1", "net", "probe", "--json", "--timeout", "2", ssh, closed, dropped, no_route, black_hole
    )
    assert result.returncode == 4, result.stdout + result.stderr
    verdicts = [r["verdict"] for r in result.json()["results"]]
    assert verdicts == ["open", "refused", "filtered", "no route", "no route"]
    [_, refused, filtered, unreachable, blackhole] = result.json()["results"]
    assert unreachable["detail"] == "No route to host" and blackhole["detail"].endswith("(a blackhole route)")
    assert refused["detail"] == "Connection refused" and filtered["detail"] == "never answered within 2s"


def test_listen_and_probe_both_ways_between_two_namespaces(fabric: Fabric) -> None:
    for server, client in (("n1", "n2"), ("n2", "n1")):
        listen = fabric.popen(server, "net", "listen", str(PORT), "--bind", "0.0.0.0", "--count", "1",
                              "--timeout", "20")  # fmt: skip
        try:
            assert listen.stdout is not None
            assert listen.stdout.readline().startswith(f"listening on 0.0.0.0:{PORT}")
            result = fabric.run(
                client, "net", "probe", f"{fabric.addresses[server]}:{PORT}", "--timeout", "3"
            )
            assert result.returncode == 0, result.stdout
            rest, _ = listen.communicate(timeout=20)
            assert f"connection from {fabric.addresses[client]}:" in rest
        finally:
            listen.kill()
            listen.wait()


def test_ifaces_in_a_namespace_names_its_veth_for_the_peer(fabric: Fabric) -> None:
    result = fabric.run("n1", "net", "ifaces", "--json", "--peer", fabric.addresses["n2"])
    assert result.returncode == 0, result.stderr
    document = result.json()
    kinds = {i["name"]: i["kind"] for i in document["interfaces"]}
    veth = fabric.veths["n1"]
    assert kinds == {"lo": "loopback", veth: "veth"}
    recommendation = document["recommendation"]
    assert recommendation["gloo_socket_ifname"] == veth
    assert recommendation["mpi_tcp_if_include"] == "10.232.1.0/24"
    assert f"routes to {fabric.addresses['n2']} through {veth}" in recommendation["reason"]


def test_master_check_from_a_worker(fabric: Fabric) -> None:
    env_args = ["net", "check", "--master", "--master-port", str(PORT), "--nnodes", "4", "--window", "2"]
    reachable = fabric.run("n2", *env_args, "--master-addr", fabric.addresses["n1"])
    assert reachable.returncode == 0, reachable.stdout
    assert "refused: the master node is reachable" in reachable.stdout
    dropped = fabric.run("n2", *env_args, "--master-addr", fabric.addresses["n3"])
    assert dropped.returncode == 5
    assert f"FAIL  {fabric.addresses['n3']}:{PORT} filtered" in dropped.stdout


def test_check_matrix_over_ssh(fabric: Fabric) -> None:
    addresses = [f"--address={node}={fabric.addresses[node]}" for node in NODES]
    result = fabric.run(
        "router", "net", "check", "--hosts", "n[1-4]", "--via", "ssh", "--ssh-config", str(fabric.ssh_config),
        "--remote-rankscope", REMOTE_RANKSCOPE, "--port", str(PORT), "--window", "3", "--json", *addresses,
        timeout=90,
    )  # fmt: skip
    assert result.returncode == 4, result.stdout + result.stderr
    document = result.json()
    assert document["schema"] == "rankscope.net.check/1"
    cells = {(c["source"], c["target"]): c["verdict"] for c in document["matrix"]["cells"]}
    for source in NODES:
        for target in NODES:
            blocked = target == "n3" or (source, target) == ("n1", "n4")
            assert cells[source, target] == ("filtered" if blocked else "open"), (source, target)
    problems = [f["problem"] for f in document["findings"]]
    assert len(problems) == 2, problems
    assert problems[0].startswith(f"no node reaches n3:{PORT} (filtered)")
    assert problems[1].startswith(f"n1 -> n4:{PORT} filtered (while n4 -> n1 is open: a one-way rule)")
    text = fabric.run(
        "router", "net", "check", "--hosts", "n[1-2]", "--via", "ssh", "--ssh-config", str(fabric.ssh_config),
        "--remote-rankscope", REMOTE_RANKSCOPE, "--port", str(PORT), "--window", "2", *addresses, timeout=90,
    )  # fmt: skip
    assert text.returncode == 0, text.stdout + text.stderr
    assert "Every node reaches every other node on this port, both ways." in text.stdout


@pytest.mark.needs("pdsh")
def test_check_over_pdsh_with_a_node_that_cannot_run_the_probes(fabric: Fabric) -> None:
    addresses = [f"--address={node}={fabric.addresses[node]}" for node in ("n1", "n2", "n3")]
    result = fabric.run(
        "router", "net", "check", "--hosts", "n[1-3]", "--via", "pdsh", "--ssh-config", str(fabric.ssh_config),
        "--remote-rankscope", REMOTE_RANKSCOPE, "--port", str(PORT), "--window", "2", "--json", *addresses,
        timeout=90,
    )  # fmt: skip
    assert result.returncode == 4, result.stdout + result.stderr
    cells = {(c["source"], c["target"]): c["verdict"] for c in result.json()["matrix"]["cells"]}
    assert cells["n1", "n2"] == cells["n2", "n1"] == "open"
    assert cells["n1", "n3"] == cells["n2", "n3"] == "filtered"
    # A node without rankscope answers nothing: its row is empty and the reason says why.
    missing = fabric.run(
        "router", "net", "check", "--hosts", "n[1-2]", "--via", "pdsh", "--ssh-config", str(fabric.ssh_config),
        "--remote-rankscope", "/nonexistent/rankscope", "--port", str(PORT), "--window", "1", *addresses[:2],
        timeout=90,
    )  # fmt: skip
    assert missing.returncode == 5, missing.stdout + missing.stderr
    assert "n1 did not run the probes: no rankscope there" in missing.stdout
