"""Nodes in network namespaces: probes that go unanswered, listen + probe both ways, `net check` over ssh.

Four "nodes" (n1-n4, 10.232.N.2) hang off one router namespace by veth pairs and reach each other
through it. Each runs its own sshd on port 22. On the checked port, n3 drops everything that comes
in (a firewall: probes get no answer) and n4 drops only what comes from n1 (a one-way rule). Every
address used here exists only inside these namespaces.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.support.cli import CliResult
from tests.support.cluster_fixtures import REMOTE_RANKSCOPE, client_env
from tests.support.netns import ip
from tests.support.sshd import Sshd, start_sshd, stop_all
from tests.support.system import ensure_tools

pytestmark = pytest.mark.needs("netns", "ssh")

PORT = 6123
NODES = ("n1", "n2", "n3", "n4")


@dataclass
class Fabric:
    router: str
    namespaces: dict[str, str]
    addresses: dict[str, str]
    ssh_config: Path
    servers: list[Sshd] = field(default_factory=list)

    def run(self, node: str, *args: str, timeout: float = 60) -> CliResult:
        """``rankscope ARGS`` inside ``node``'s namespace (``router``: the router's)."""
        namespace = self.router if node == "router" else self.namespaces[node]
        proc = subprocess.run(
            ["ip", "netns", "exec", namespace, sys.executable, "-m", "rankscope", *args],
            capture_output=True, text=True, timeout=timeout, env=client_env(),
        )  # fmt: skip
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    def popen(self, node: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["ip", "netns", "exec", self.namespaces[node], sys.executable, "-m", "rankscope", *args],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip


def _iptables(namespace: str, *rule: str) -> None:
    subprocess.run(
        ["ip", "netns", "exec", namespace, "iptables", *rule], check=True, capture_output=True, timeout=20
    )


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    ensure_tools("netns", "ssh")
    tag = f"rsnet{os.getpid() % 100000}"
    router = f"{tag}-router"
    made: list[str] = []
    servers: list[Sshd] = []
    try:
        subprocess.run(["ip", "netns", "add", router], check=True, timeout=20)
        made.append(router)
        ip("link", "set", "lo", "up", netns=router)
        subprocess.run(["ip", "netns", "exec", router, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"],
                       check=True, timeout=20)  # fmt: skip
        namespaces, addresses = {}, {}
        for index, node in enumerate(NODES, start=1):
            namespace = f"{tag}-{node}"
            subprocess.run(["ip", "netns", "add", namespace], check=True, timeout=20)
            made.append(namespace)
            outer, inner = f"rn{os.getpid() % 100000}r{index}", f"rn{os.getpid() % 100000}n{index}"
            ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            ip("link", "set", outer, "netns", router)
            ip("link", "set", inner, "netns", namespace)
            ip("addr", "add", f"10.232.{index}.1/24", "dev", outer, netns=router)
            ip("link", "set", outer, "up", netns=router)
            ip("addr", "add", f"10.232.{index}.2/24", "dev", inner, netns=namespace)
            ip("link", "set", inner, "up", netns=namespace)
            ip("link", "set", "lo", "up", netns=namespace)
            ip("route", "add", "10.232.0.0/16", "via", f"10.232.{index}.1", netns=namespace)
            namespaces[node], addresses[node] = namespace, f"10.232.{index}.2"
        _iptables(namespaces["n3"], "-A", "INPUT", "-p", "tcp", "--dport", str(PORT), "-j", "DROP")
        _iptables(namespaces["n4"], "-A", "INPUT", "-s", addresses["n1"], "-p", "tcp", "--dport", str(PORT),
                  "-j", "DROP")  # fmt: skip
        blocks = []
        known = []
        for node in NODES:
            server = start_sshd(
                tmp_path_factory.mktemp(f"sshd-{node}"), listen=addresses[node], netns=namespaces[node]
            )
            servers.append(server)
            known.append(server.known_hosts.read_text())
            blocks.append(
                f"Host {node}\n  HostName {addresses[node]}\n  Port 22\n  IdentityFile {server.client_key}"
            )
        workdir = tmp_path_factory.mktemp("fabric")
        (workdir / "known_hosts").write_text("".join(known))
        ssh_config = workdir / "ssh_config"
        defaults = ["Host *", "  IdentitiesOnly yes", "  User root", "  BatchMode yes",
                    f"  UserKnownHostsFile {workdir / 'known_hosts'}", "  StrictHostKeyChecking yes",
                    "  CheckHostIP no", "  LogLevel ERROR"]  # fmt: skip
        ssh_config.write_text("\n\n".join([*blocks, "\n".join(defaults)]) + "\n")
        yield Fabric(router, namespaces, addresses, ssh_config, servers)
    finally:
        stop_all(servers)
        for namespace in reversed(made):
            with contextlib.suppress(Exception):
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=20)


def test_probe_tells_open_refused_and_filtered_apart(fabric: Fabric) -> None:
    ssh = f"{fabric.addresses['n2']}:22"
    closed = f"{fabric.addresses['n2']}:{PORT}"
    dropped = f"{fabric.addresses['n3']}:{PORT}"
    result = fabric.run("n1", "net", "probe", "--json", "--timeout", "2", ssh, closed, dropped)
    assert result.returncode == 4, result.stdout + result.stderr
    verdicts = [r["verdict"] for r in result.json()["results"]]
    assert verdicts == ["open", "refused", "filtered"]
    [_, refused, filtered] = result.json()["results"]
    assert refused["elapsed"] < 1.5 and filtered["detail"] == "never answered within 2s"


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
    veth = f"rn{os.getpid() % 100000}n1"
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
