"""Session-scoped fixtures with real cluster engines: sshd "nodes", SLURM, network namespaces.

Registered through ``pytest_plugins`` in tests/conftest.py, so any test can ask for them.
Each fixture installs what it needs (apt-get, see system.py) and tears down in ``finally``;
requesting one declares its tools (``FIXTURE_NEEDS`` in tools.py: keep it in step). Under
pytest-xdist each worker that needs one starts its own: its own free ports, scratch directory
and names (process id), so two never meet (docs/testing.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
from tests.support.cli import CliResult, run_cli
from tests.support.multinode_job import MultiNodeJob, multinode_job
from tests.support.netns import NetnsNodes, create_client
from tests.support.slurm import SlurmCluster, start_slurm
from tests.support.sshd import Sshd, add_alias, free_port, start_sshd
from tests.support.system import ensure_tools
from tests.support.users import local_users  # noqa: F401  (a fixture for every test directory)

#: The "remote" rankscope every test node runs: this very install.
REMOTE_RANKSCOPE = str(Path(sys.executable).with_name("rankscope"))
#: What a node needs first so that the remote rankscope also finds py-spy next to it.
REMOTE_SETUP = f"export PATH={Path(sys.executable).parent}:$PATH"

SSH_NODES = [f"node{i:02d}" for i in range(1, 5)]


@pytest.fixture(scope="session")
def sshd_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """sshd on 127.0.0.1 reachable as node01..node04, plus ``badauth`` (login refused) and
    ``unknownkey`` (host key not in known_hosts) and ``closedport`` (nothing listens)."""
    ensure_tools("ssh")
    server = start_sshd(tmp_path_factory.mktemp("sshd"), SSH_NODES)
    try:
        add_alias(server, "badauth", User="rankscope-no-such-user")
        add_alias(server, "unknownkey", HostKeyAlias="rankscope-unknown-key")
        add_alias(server, "closedport", Port=str(free_port()))
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def hung_two_node_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiNodeJob]:
    """Two torchrun agents ("node01", "node02") of a hung job: ranks 0-1 on node01, 2-3 on node02; rank 2
    deadlocks on its own lock, the others wait in all_reduce. The tests of tests/cluster/test_stacks_ssh.py
    read it and change nothing (the `--hosts` test of `stacks --from` is there too, so that one job serves
    them all): one per module, stopped when its file is done rather than left to idle for the rest of the
    worker's session."""
    # A long module on a loaded machine may outlast hang_job's default 10-minute collective timeout.
    with multinode_job(
        tmp_path_factory.mktemp("job"), ["node01", "node02"], culprit=2, collective_timeout=3600
    ) as job:
        yield job


@pytest.fixture(scope="session")
def pdsh_installed() -> None:
    ensure_tools("pdsh")


def client_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PDSH_SSH_ARGS_APPEND", None)
    return env


def via_args(sshd: Sshd, verb: str, *args: str, via: str = "ssh") -> list[str]:
    """The arguments of ``rankscope VERB --via VIA --ssh-config <sshd's config> ARGS``: a command
    over ``sshd``'s nodes (``exec``, ``stacks --hosts``, ``why --hosts``, ``net check``)."""
    return [*verb.split(), "--via", via, "--ssh-config", str(sshd.ssh_config), *args]


def run_via(sshd: Sshd, verb: str, *args: str, via: str = "ssh", timeout: float = 120) -> CliResult:
    """``rankscope VERB`` over ``sshd``'s nodes (:func:`via_args`), run as the client side would."""
    return run_cli(*via_args(sshd, verb, *args, via=via), env=client_env(), timeout=timeout)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running single-node SLURM cluster (node ``localhost``); use ``.env`` for clients."""
    ensure_tools("slurm")
    cluster = start_slurm(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


@dataclass
class NetnsCluster:
    """Namespaced nodes: ``sshnode`` runs sshd, ``blackhole`` drops everything, ``closed`` has no listener."""

    net: NetnsNodes
    sshd: Sshd

    def run_cli(self, *args: str, timeout: float = 120) -> CliResult:
        proc = subprocess.run(
            self.net.exec_argv([sys.executable, "-m", "rankscope", *args]),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=client_env(),
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    def run_via(self, verb: str, *args: str, via: str = "ssh") -> CliResult:
        """``rankscope VERB`` over these nodes from the client namespace (:func:`via_args`)."""
        return self.run_cli(*via_args(self.sshd, verb, *args, via=via))


@pytest.fixture(scope="session")
def netns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsCluster]:
    ensure_tools("netns", "ssh")
    net = create_client()
    sshd: Optional[Sshd] = None
    try:
        address = net.add_node("sshnode")
        net.add_node("blackhole")
        net.add_node("closed")
        net.black_hole("blackhole")
        sshd = start_sshd(
            tmp_path_factory.mktemp("netns-sshd"), listen=address, netns=net.namespaces["sshnode"]
        )
        for name in ("sshnode", "blackhole", "closed"):
            add_alias(sshd, name, HostName=net.nodes[name], Port="22")
        yield NetnsCluster(net, sshd)
    finally:
        if sshd is not None:
            sshd.stop()
        net.delete()
