"""Session-scoped fixtures with real cluster engines: sshd "nodes", SLURM, network namespaces.

Registered through ``pytest_plugins`` in tests/conftest.py, so any test can ask for them.
Each fixture installs what it needs (apt-get, see system.py) and tears down in ``finally``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.slurm import SlurmCluster, start_slurm
from tests.support.sshd import Sshd, add_alias, free_port, start_sshd
from tests.support.system import ensure_commands

#: The "remote" rankscope every test node runs: this very install.
REMOTE_RANKSCOPE = str(Path(sys.executable).with_name("rankscope"))
#: What a node needs first so that the remote rankscope also finds py-spy next to it.
REMOTE_SETUP = f"export PATH={Path(sys.executable).parent}:$PATH"

SSH_NODES = [f"node{i:02d}" for i in range(1, 5)]


@pytest.fixture(scope="session")
def sshd_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """sshd on 127.0.0.1 reachable as node01..node04, plus ``badauth`` (login refused) and
    ``unknownkey`` (host key not in known_hosts) and ``closedport`` (nothing listens)."""
    ensure_commands({"sshd": "openssh-server", "ssh": "openssh-client", "ssh-keyscan": "openssh-client"})
    server = start_sshd(tmp_path_factory.mktemp("sshd"), SSH_NODES)
    try:
        add_alias(server, "badauth", User="rankscope-no-such-user")
        add_alias(server, "unknownkey", HostKeyAlias="rankscope-unknown-key")
        add_alias(server, "closedport", Port=str(free_port()))
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pdsh_installed() -> None:
    ensure_commands({"pdsh": "pdsh"})


def client_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PDSH_SSH_ARGS_APPEND", None)
    return env


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running single-node SLURM cluster (node ``localhost``); use ``.env`` for clients."""
    ensure_commands(
        {"slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "sbatch": "slurm-wlm", "munged": "munge"}
    )
    cluster = start_slurm(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()
