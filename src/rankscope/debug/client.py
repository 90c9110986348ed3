"""The client side of a rank's remote pdb (``rankscope attach``), and ``--pid`` through PEP 768.

:func:`connect` opens the socket a stopped rank printed, sends the token and returns the
connection once the rank accepts it; every way that fails is a :class:`RankscopeError` with its
exit code (docs/exit-codes.md). The interactive loop is in ``cli/attach.py``.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn, Optional

from rankscope import procfs
from rankscope.debug import remote
from rankscope.errors import BadInputError, ExitCode, RankscopeError

#: Seconds to connect, and then to hear the rank's answer to the token.
CONNECT_TIMEOUT = 10.0

#: Python's own version in a path: libpython3.14.so, python3.14, python3.14d.
_VERSION_IN_PATH = re.compile(r"python(\d+)\.(\d+)")

#: The first Python whose pdb attaches to a running process (PEP 768: python -m pdb -p PID).
REMOTE_PDB_PYTHON = (3, 14)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPV6]:PORT`` into (host, port)."""
    match = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\s]+):(\d+)", text.strip())
    if match is None:
        raise BadInputError(
            f"bad address {text!r}", "give HOST:PORT as the rank printed it (127.0.0.1:41234)"
        )
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not 0 < port < 65536:
        raise BadInputError(f"bad port {port} in {text!r}", "a port is 1 to 65535")
    return host, port


def _read_answer(conn: socket.socket) -> Optional[str]:
    data = b""
    while not data.endswith(b"\n") and len(data) < 256:
        chunk = conn.recv(1)  # one byte at a time: pdb's text after the answer stays in the socket
        if not chunk:
            return None
        data += chunk
    return data.decode("utf-8", "replace").strip()


def connect(host: str, port: int, token: str, timeout: float = CONNECT_TIMEOUT) -> tuple[socket.socket, str]:
    """A TCP connection accepted by the rank, and its greeting (``rank 1 pid 4242``)."""
    where = f"{host}:{port}"
    try:
        conn = socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror as exc:
        raise BadInputError(
            f"unknown host {host!r} ({exc.strerror})", "give the address the rank printed"
        ) from None
    except ConnectionRefusedError:
        raise RankscopeError(
            f"nothing listens on {where}",
            "the rank went on already, or the address is not the one it printed",
            ExitCode.ALL_FAILED,
        ) from None
    except OSError as exc:
        reason = "timed out" if isinstance(exc, socket.timeout) else (exc.strerror or str(exc))
        raise RankscopeError(
            f"cannot reach {where}: {reason}",
            "run attach on the rank's node (ssh NODE), or tunnel with ssh -L",
            ExitCode.ALL_FAILED,
        ) from None
    return conn, _hello(conn, where, f"{remote.HELLO} {token}", timeout)


def _hello(conn: socket.socket, where: str, hello: str, timeout: float) -> str:
    """Send the hello line; the rank's greeting once it accepts. Closes ``conn`` on any refusal."""
    try:
        conn.sendall(f"{hello}\n".encode())
        answer = _read_answer(conn)
    except OSError:
        answer = None
    if answer is None:
        conn.close()
        raise RankscopeError(
            f"{where} did not answer within {timeout:g} s",
            "another client may be attached (one at a time), or this is not a rankscope breakpoint",
            ExitCode.ALL_FAILED,
        )
    if answer in (remote.REFUSED, remote.NOT_YOURS):
        conn.close()
        hint = (
            "copy --token-file from the line the rank printed; the rank still waits for it"
            if answer == remote.REFUSED
            else "attach as the user who runs it, or as root"
        )
        refusal = (
            "refused the token" if answer == remote.REFUSED else "refused: only its user and root may attach"
        )
        raise RankscopeError(f"{where} {refusal}", hint, ExitCode.PERMISSION_DENIED)
    if not answer.startswith(remote.ACCEPTED + " "):
        conn.close()
        raise RankscopeError(
            f"{where} is not a rankscope breakpoint (it answered {answer[:60]!r})",
            "check the address",
            ExitCode.ALL_FAILED,
        )
    conn.settimeout(None)
    return answer[len(remote.ACCEPTED) + 1 :]


@contextlib.contextmanager
def _reading_proc(pid: int, denied: str, hint: str) -> Iterator[None]:
    """Turn a missing /proc/PID entry into "no such process", a refused one into ``denied`` (exit 7)."""
    try:
        yield
    except FileNotFoundError:
        raise BadInputError(f"no process with pid {pid}", "check the pid with ps or pgrep") from None
    except PermissionError:
        raise RankscopeError(denied, hint, ExitCode.PERMISSION_DENIED) from None


def _socket_inodes(pid: int) -> set[str]:
    """The socket inodes among process ``pid``'s descriptors (listing them is for its user and root)."""
    with _reading_proc(
        pid, f"process {pid} belongs to another user", "only its user and root may attach to it"
    ):
        links = procfs.fd_links(pid)
    return {target[len("socket:[") : -1] for _, target in links if target.startswith("socket:[")}


def breakpoint_socket(pid: int) -> Optional[str]:
    """The abstract Unix socket a rankscope breakpoint in process ``pid`` listens on, if any."""
    inodes = _socket_inodes(pid)
    rows = [line.split() for line in procfs.net_table(pid, "unix").splitlines()]
    prefix = f"@{remote.UNIX_PREFIX}"  # then the pid the rank saw: another one inside a container
    for row in rows:  # Num RefCount Protocol Flags Type St Inode Path
        if len(row) >= 8 and row[6] in inodes and row[7].startswith(prefix):
            return row[7][1:]
    return None


def connect_pid(pid: int, name: str, timeout: float = CONNECT_TIMEOUT) -> tuple[socket.socket, str]:
    """A connection to process ``pid``'s breakpoint socket ``name``, checked to be served by ``pid``."""
    where = f"process {pid}"
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        conn.connect("\0" + name)
        server_pid = remote.peer_credentials(conn)[0]
    except OSError as exc:
        conn.close()
        raise RankscopeError(
            f"cannot reach the breakpoint of {where}: {exc.strerror or exc}",
            "the rank went on already; or it runs in another network namespace (a container): attach from inside it",
            ExitCode.ALL_FAILED,
        ) from None
    if server_pid != pid:
        conn.close()
        raise RankscopeError(
            f"the socket {name} is served by process {server_pid}, not {pid}",
            "the rank went on already; give the pid it printed",
            ExitCode.ALL_FAILED,
        )
    return conn, _hello(conn, where, remote.HELLO, timeout)


def read_token_file(path: str) -> str:
    """The token in the file a rank listening on TCP named (``--token-file``)."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            token = handle.read(256).strip()
    except FileNotFoundError:
        raise BadInputError(
            f"no token file {path}", "the rank went on already, or the file is on the rank's node"
        ) from None
    except PermissionError:
        raise RankscopeError(
            f"cannot read {path}: permission denied",
            "only the rank's user and root may attach to it",
            ExitCode.PERMISSION_DENIED,
        ) from None
    except OSError as exc:
        raise BadInputError(
            f"cannot read {path}: {exc.strerror or exc}", "give the file the rank printed"
        ) from None
    if not token:
        raise BadInputError(f"{path} holds no token", "give the file the rank printed")
    return token


@dataclass(frozen=True)
class Credentials:
    """Whom a process runs as: effective uid and gid, and its supplementary groups."""

    uid: int
    gid: int
    groups: tuple[int, ...]


def credentials_of(pid: int) -> Credentials:
    """The credentials process ``pid`` runs with (/proc/PID/status)."""
    fields = {name: procfs.status_field(pid, name) or "" for name in ("Uid", "Gid", "Groups")}
    try:
        uid = int(fields["Uid"].split()[1])
        gid = int(fields["Gid"].split()[1])
        groups = tuple(int(group) for group in fields["Groups"].split())
    except (IndexError, ValueError):
        raise BadInputError(f"no process with pid {pid}", "check the pid with ps or pgrep") from None
    return Credentials(uid, gid, groups)


def become(owner: Credentials) -> None:
    """Drop to ``owner``'s credentials for good (in a child, or before exec); a no-op when already them.

    Root's rankscope runs nothing of another user's as root: the target's interpreter is that user's
    to replace, so it runs with that user's rights alone.
    """
    if os.geteuid() == owner.uid:
        return
    os.setgroups(list(owner.groups))
    os.setresgid(owner.gid, owner.gid, owner.gid)
    os.setresuid(owner.uid, owner.uid, owner.uid)
    if os.getresuid() != (owner.uid,) * 3:  # never go on with privileges left
        os._exit(126)


def _child_env(owner: Credentials) -> dict[str, str]:
    """The environment for the target's interpreter: no PYTHON* variable, the owner's home."""
    import pwd

    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    try:
        env["HOME"] = pwd.getpwuid(owner.uid).pw_dir
    except KeyError:
        env.pop("HOME", None)
    return env


def _ask_version(exe: str, owner: Credentials) -> Optional[tuple[int, int]]:
    """Ask interpreter ``exe`` its version, as ``owner`` and in isolated mode (-I)."""
    from rankscope import lifetime

    try:
        out = (
            lifetime.run(
                [exe, "-I", "-c", "import sys; print(*sys.version_info[:2])"],
                10,
                env=_child_env(owner),
                stderr=subprocess.DEVNULL,
                preexec_fn=lambda: become(owner),
            )
            .text()
            .split()
        )
        return int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def python_version_of(pid: int) -> Optional[tuple[int, int]]:
    """The Python version process ``pid`` runs: from its executable's name, its libpython, or by
    asking it (as the process's own user, in isolated mode)."""
    with _reading_proc(
        pid, f"cannot read /proc/{pid}/exe: permission denied", "run as the process owner or as root"
    ):
        exe = os.readlink(f"/proc/{pid}/exe")
    found = _VERSION_IN_PATH.search(os.path.basename(exe))
    if found is None:
        try:
            with open(f"/proc/{pid}/maps") as handle:
                found = next(
                    (
                        m
                        for m in (_VERSION_IN_PATH.search(line) for line in handle if "libpython" in line)
                        if m
                    ),
                    None,
                )
        except OSError:
            found = None
    if found is not None:
        return int(found.group(1)), int(found.group(2))
    if not os.path.basename(exe).startswith("python"):  # never run a program that is not a Python
        return None
    # A binary named plain "python" or "python3" and linked statically: ask it.
    return _ask_version(exe, credentials_of(pid))


def pdb_attach_argv(pid: int) -> list[str]:
    """``PYTHON -I -m pdb -p PID`` with the target's own Python, where it is 3.14 or later (PEP 768).

    Run it with :func:`exec_as_owner`: never as root for another user's process.
    """
    version = python_version_of(pid)
    if version is None:
        raise BadInputError(f"process {pid} does not look like a Python process", "give the pid of a rank")
    if version < REMOTE_PDB_PYTHON:
        raise RankscopeError(
            f"process {pid} runs Python {version[0]}.{version[1]}: attaching pdb to a running process "
            "needs Python 3.14 or later (PEP 768: python -m pdb -p PID)",
            "put rankscope.breakpoint(rank=N) in the code and attach to the line it prints (docs/debug.md)",
            ExitCode.MISSING_TOOL,
        )
    exe = os.readlink(f"/proc/{pid}/exe")
    if exe.endswith(" (deleted)"):
        raise RankscopeError(
            f"process {pid} runs {exe}: its Python was removed or replaced since it started",
            "run pdb -p with the same Python version by hand: PYTHON -m pdb -p PID",
            ExitCode.MISSING_TOOL,
        )
    return [exe, "-I", "-m", "pdb", "-p", str(pid)]


def exec_as_owner(argv: list[str], pid: int) -> NoReturn:
    """Become process ``pid``'s user and run ``argv`` in place of this process."""
    owner = credentials_of(pid)
    try:
        become(owner)
    except OSError as exc:
        raise RankscopeError(
            f"cannot take the credentials of process {pid}'s user (uid {owner.uid}): {exc.strerror or exc}",
            "run rankscope attach --pid as that user or as root",
            ExitCode.PERMISSION_DENIED,
        ) from None
    env = _child_env(owner)
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        raise RankscopeError(
            f"cannot run {argv[0]}: {exc.strerror or exc}",
            "run pdb -p with the process's Python by hand: PYTHON -I -m pdb -p PID",
            ExitCode.MISSING_TOOL,
        ) from None
