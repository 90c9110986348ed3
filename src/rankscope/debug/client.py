"""The client side of a rank's remote pdb (``rankscope attach``), and ``--pid`` through PEP 768.

:func:`connect` opens the socket a stopped rank printed, sends the token and returns the
connection once the rank accepts it; every way that fails is a :class:`RankscopeError` with its
exit code (docs/exit-codes.md). The interactive loop is in ``cli/attach.py``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from typing import Optional

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
    """A connection accepted by the rank, and its greeting (``rank 1 pid 4242``)."""
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
            "the rank listens on its own node's 127.0.0.1: run attach there (ssh NODE), or tunnel with ssh -L",
            ExitCode.ALL_FAILED,
        ) from None
    try:
        conn.sendall(f"{remote.HELLO} {token}\n".encode())
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
    if answer == remote.REFUSED:
        conn.close()
        raise RankscopeError(
            f"{where} refused the token",
            "copy --token from the line the rank printed; the rank still waits for it",
            ExitCode.PERMISSION_DENIED,
        )
    if not answer.startswith(remote.ACCEPTED + " "):
        conn.close()
        raise RankscopeError(
            f"{where} is not a rankscope breakpoint (it answered {answer[:60]!r})",
            "check the address",
            ExitCode.ALL_FAILED,
        )
    conn.settimeout(None)
    return conn, answer[len(remote.ACCEPTED) + 1 :]


def python_version_of(pid: int) -> Optional[tuple[int, int]]:
    """The Python version process ``pid`` runs: from its executable's name, its libpython, or by asking it."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except FileNotFoundError:
        raise BadInputError(f"no process with pid {pid}", "check the pid with ps or pgrep") from None
    except PermissionError:
        raise RankscopeError(
            f"cannot read /proc/{pid}/exe: permission denied",
            "run as the process owner or as root",
            ExitCode.PERMISSION_DENIED,
        ) from None
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
    try:  # a binary named plain "python" or "python3" and linked statically: ask it
        out = subprocess.run(
            [exe, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.split()
        return int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def pdb_attach_argv(pid: int) -> list[str]:
    """``PYTHON -m pdb -p PID`` with the target's own Python, where it is 3.14 or later (PEP 768)."""
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
    return [exe, "-m", "pdb", "-p", str(pid)]
