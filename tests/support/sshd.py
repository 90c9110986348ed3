"""A private sshd on 127.0.0.1 whose host aliases stand in for cluster nodes.

Key-based only: a host key and a client key are generated per test session; the client
side is an ssh config file (pass it with ``ssh -F`` / ``--ssh-config``) that names each
alias, the identity, and a known_hosts file filled by ``ssh-keyscan``; host keys are checked.
Every alias sends ``RANKSCOPE_NODE=<alias>`` (SetEnv/AcceptEnv) so one machine can play many nodes.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tests.support.leftovers import started_before

#: Two lines of every sshd's configuration that make a connection cost a sixth of the CPU, and nothing
#: the tests read. bash, the login shell, reads ~/.bashrc for a command sshd runs unless it is a nested
#: shell: SHLVL=1 makes it one, so a node's session does not run this machine's root ~/.bashrc (which
#: runs `pyenv init` here: 0.15 CPU-s a connection). curve25519 is a key exchange of every OpenSSH;
#: the client's first choice, sntrup761x25519, costs it 0.1 CPU-s a connection. After ``extra``: sshd
#: takes the first SetEnv line, so a test that sets its own (a slow ~/.bashrc of its own) still gets it.
SESSION_COST = ("SetEnv SHLVL=1", "KexAlgorithms curve25519-sha256")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_port(host: str, port: int, timeout: float = 15.0, netns: Optional[str] = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if netns is None:
            with socket.socket() as sock:
                sock.settimeout(0.5)
                if sock.connect_ex((host, port)) == 0:
                    return
        else:
            probe = ["ip", "netns", "exec", netns, "bash", "-c", f"exec 3<>/dev/tcp/{host}/{port}"]
            if subprocess.run(probe, capture_output=True).returncode == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {host}:{port}")


def keygen(path: Path) -> Path:
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@dataclass
class Sshd:
    """One running sshd and the client config that reaches it under several names."""

    workdir: Path
    listen: str
    port: int
    pid: int
    client_key: Path
    ssh_config: Path
    known_hosts: Path
    aliases: list[str] = field(default_factory=list)
    netns: Optional[str] = None
    defaults: str = ""
    alias_blocks: list[str] = field(default_factory=list)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 3 s, through a pidfd: once sshd is gone (its parent is pid 1,
        which reaps it at once) its pid may be a new process's, which a plain kill would hit."""
        pid_file = self.workdir / "sshd.pid"
        if pid_file.exists() and not started_before(self.pid, pid_file.stat().st_mtime):
            return  # gone already, and its pid taken by a later process
        try:
            handle = os.pidfd_open(self.pid)
        except OSError:  # gone already
            return
        try:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    signal.pidfd_send_signal(handle, sig)
                except ProcessLookupError:
                    return
                if select.select([handle], [], [], 3.0)[0]:  # readable: it exited
                    return
        finally:
            os.close(handle)

    def add_alias(self, alias: str, **options: str) -> None:
        """Another name for this sshd (``options`` override the defaults, e.g. IdentityFile)."""
        lines = [
            f"Host {alias}",
            f"  HostName {options.pop('HostName', self.listen)}",
            f"  Port {options.pop('Port', str(self.port))}",
            f"  SetEnv RANKSCOPE_NODE={alias}",
        ]
        lines += [f"  {key} {value}" for key, value in options.items()]
        self.alias_blocks.append("\n".join(lines))
        self.aliases.append(alias)
        # ssh takes the first value it reads: aliases first, the shared defaults ("Host *") last.
        self.ssh_config.write_text("\n\n".join([*self.alias_blocks, self.defaults]) + "\n")


def start_sshd(
    workdir: Path,
    aliases: Sequence[str] = (),
    listen: str = "127.0.0.1",
    netns: Optional[str] = None,
    extra: Sequence[str] = (),
) -> Sshd:
    """Start sshd on ``listen`` (inside ``netns`` if given) and write the client config for ``aliases``.

    ``extra`` lines are added to the sshd configuration.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    host_key = keygen(workdir / "host_key")
    client_key = keygen(workdir / "client_key")
    authorized = workdir / "authorized_keys"
    authorized.write_text(Path(f"{client_key}.pub").read_text())
    port = free_port() if netns is None else 22
    pid_file = workdir / "sshd.pid"
    config = workdir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                f"ListenAddress {listen}",
                f"HostKey {host_key}",
                f"PidFile {pid_file}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                f"AuthorizedKeysFile {authorized}",
                "StrictModes no",
                "UseDNS no",
                "AcceptEnv RANKSCOPE_*",
                "AllowUsers root",
                # Many "nodes" are one sshd here: let them all connect at once.
                "MaxStartups 512",
                "MaxSessions 512",
                "LogLevel ERROR",
                *extra,
                *SESSION_COST,
                "",
            ]
        )
    )
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run(
        [*prefix, "/usr/sbin/sshd", "-f", str(config), "-E", str(workdir / "sshd.log")], check=True
    )
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text().strip():
        if time.monotonic() > deadline:
            raise TimeoutError(f"sshd did not start: {(workdir / 'sshd.log').read_text(errors='replace')}")
        time.sleep(0.05)
    pid = int(pid_file.read_text().strip())
    sshd = Sshd(
        workdir=workdir,
        listen=listen,
        port=port,
        pid=pid,
        client_key=client_key,
        ssh_config=workdir / "ssh_config",
        known_hosts=workdir / "known_hosts",
        netns=netns,
    )
    try:
        wait_port(listen, port, netns=netns)
        scan = subprocess.run(
            [*prefix, "ssh-keyscan", "-p", str(port), "-t", "ed25519", listen],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
        sshd.known_hosts.write_text(scan.stdout)
        sshd.defaults = "\n".join(
            [
                "Host *",
                f"  IdentityFile {client_key}",
                "  IdentitiesOnly yes",
                "  User root",
                "  BatchMode yes",
                f"  UserKnownHostsFile {sshd.known_hosts}",
                "  StrictHostKeyChecking yes",
                "  CheckHostIP no",
                "  LogLevel ERROR",
            ]
        )
        sshd.ssh_config.write_text(sshd.defaults + "\n")
        for alias in aliases:
            sshd.add_alias(alias)
    except BaseException:
        sshd.stop()
        raise
    return sshd


def add_alias(sshd: Sshd, alias: str, **options: str) -> None:
    sshd.add_alias(alias, **options)


def stop_all(servers: Sequence[Sshd]) -> None:
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()
