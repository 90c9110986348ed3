"""Record what ssh and pdsh really print in each failure case, for the classifier's unit tests.

    sudo .venv/bin/python tests/cluster/data/record_transport_outcomes.py   # rewrites transport_outcomes.json

Runs in a private network namespace (the black hole is an iptables DROP there): one sshd on
127.0.0.1 as ``node01``, a second one whose login shell sleeps (a slow ``~/.bashrc``), a port that
accepts connections and never speaks, a dropped port, a closed port, a wrong user, an unknown
host key and an unresolvable name. Each case keeps the transport's exit code, stdout, stderr
(ssh ``-v`` lines included) and whether it was stopped at its deadline, exactly as the fan-out
would hand them to :func:`rankscope.cluster.classify.classify`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.support.sshd import add_alias, free_port, start_sshd  # noqa: E402

from rankscope.cluster.transports import PdshTransport, SshOptions, SshTransport, remote_script  # noqa: E402

OUT = Path(__file__).with_name("transport_outcomes.json")
DEADLINE = 4.0


def run(argv: list[str], env: dict[str, str] | None, deadline: float) -> dict[str, object]:
    # As the fan-out does: a silent stdin held open while the node runs (the remote watcher of
    # remote_script ends the command at its end of file).
    stdin_read, stdin_write = os.pipe()
    process = subprocess.Popen(
        argv, stdin=stdin_read, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        start_new_session=True,
    )  # fmt: skip
    os.close(stdin_read)
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGTERM)
        stdout, stderr = process.communicate()
    finally:
        os.close(stdin_write)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    return {
        "returncode": None if timed_out else process.returncode,
        "stdout": stdout.decode(errors="replace"),
        "stderr": stderr.decode(errors="replace"),
        "timed_out": timed_out,
        "deadline": deadline,
    }


def silent_port() -> int:
    """A port that accepts TCP connections and never sends an ssh banner."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in range(16)], daemon=True).start()
    return int(server.getsockname()[1])


def inner() -> int:
    os.environ.pop("PDSH_SSH_ARGS_APPEND", None)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    scratch = Path(tempfile.mkdtemp(prefix="rankscope-record-"))
    slow_home = scratch / "slow-home"
    slow_home.mkdir()
    (slow_home / ".bashrc").write_text("sleep 30\n")
    main = start_sshd(scratch / "sshd", ["node01"])
    slow = start_sshd(scratch / "slow-sshd", [], extra=[f"SetEnv HOME={slow_home}"])
    try:
        add_alias(main, "badauth", User="rankscope-no-such-user")
        add_alias(main, "unknownkey", HostKeyAlias="rankscope-unknown-key")
        add_alias(main, "closedport", Port=str(free_port()))
        add_alias(main, "noname", HostName="rankscope-no-such-host.invalid")
        add_alias(main, "silent", Port=str(silent_port()))
        hole = free_port()
        subprocess.run(
            ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", str(hole), "-j", "DROP"], check=True
        )
        add_alias(main, "blackhole", Port=str(hole))
        slow_keys = {"UserKnownHostsFile": str(slow.known_hosts), "IdentityFile": str(slow.client_key)}
        add_alias(main, "slowlogin", Port=str(slow.port), **slow_keys)
        options = SshOptions(config_file=str(main.ssh_config), connect_timeout=DEADLINE + 1)
        ssh, pdsh = SshTransport(options), PdshTransport(options, command_timeout=DEADLINE)
        hello = remote_script("echo hello")
        failing = remote_script("echo partial; echo 'no such file: /data/x' >&2; exit 3")
        cases = {
            "ssh ok": (ssh, "node01", hello),
            "ssh command exits 3": (ssh, "node01", failing),
            "ssh command still running": (ssh, "node01", remote_script("sleep 30")),
            "ssh connection refused": (ssh, "closedport", hello),
            "ssh login refused": (ssh, "badauth", hello),
            "ssh unknown host key": (ssh, "unknownkey", hello),
            "ssh unresolvable name": (ssh, "noname", hello),
            "ssh black hole": (ssh, "blackhole", hello),
            "ssh no banner": (ssh, "silent", hello),
            "ssh slow login shell": (ssh, "slowlogin", hello),
            "pdsh ok": (pdsh, "node01", hello),
            "pdsh command exits 3": (pdsh, "node01", failing),
            "pdsh connection refused": (pdsh, "closedport", hello),
            "pdsh login refused": (pdsh, "badauth", hello),
        }
        recorded = {}
        for name, (transport, node, script) in cases.items():
            outcome = run(transport.node_argv(node, script), transport.env(), DEADLINE)
            recorded[name] = {"transport": transport.name, "node": node, **outcome}
            print(f"{name}: rc={outcome['returncode']} timed_out={outcome['timed_out']}", file=sys.stderr)
        OUT.write_text(json.dumps(recorded, indent=2) + "\n")
        return 0
    finally:
        main.stop()
        slow.stop()


def main() -> int:
    if "--inner" in sys.argv:
        return inner()
    namespace = f"rsrecord{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        argv = ["ip", "netns", "exec", namespace, sys.executable, __file__, "--inner"]
        return subprocess.run(argv).returncode
    finally:
        subprocess.run(["ip", "netns", "del", namespace])


if __name__ == "__main__":
    sys.exit(main())
