"""pdb served on a socket, for a rank that has no terminal (srun, pdsh, a background launcher).

The protocol, shared with ``rankscope attach`` (:mod:`rankscope.debug.client`):

1. The client connects and sends one line: ``RANKSCOPE-ATTACH 1 TOKEN``.
2. The server answers one line: ``OK rank R pid P`` or ``ERR wrong token`` (then closes, waits
   :data:`REFUSAL_PAUSE` seconds and listens again: the rank stays available for the right token).
3. Then the stream is pdb's own text both ways. Each time pdb waits for a line, the server sends
   :data:`INPUT` (a NUL byte, which pdb's text never holds): the client shows the prompt, reads a
   line with line editing, and sends it. The client closing the connection (Ctrl-D) is an end of
   file for pdb: the rank detaches and goes on.

Security model: the socket listens on 127.0.0.1 unless the caller names another address
(``RANKSCOPE_BREAKPOINT_HOST``); only someone on this node (ssh there, or ``ssh -L``) reaches it.
The token is 128 random bits (``secrets.token_urlsafe(16)``), compared in constant time
(``hmac.compare_digest``); one client at a time; nothing but pdb's text crosses the socket,
unencrypted (use an ssh tunnel rather than a non-loopback address across an untrusted network).
Anyone who can read the job's stderr can read the token, as anyone who can read it could already
read the job's output.

Imported inside training processes: Python 3.9, standard library only.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import socket
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

#: First line a client sends, before its token.
HELLO = "RANKSCOPE-ATTACH 1"
#: The server's answers to it.
ACCEPTED = "OK"
REFUSED = "ERR wrong token"
#: Sent each time pdb waits for a line.
INPUT = b"\x00"
#: Seconds a client has to send its hello line.
HELLO_TIMEOUT = 10.0
#: Seconds the server waits after a wrong token before it listens again (no fast guessing).
REFUSAL_PAUSE = 0.5
#: Longest hello line the server reads.
_HELLO_MAX = 256


def new_token() -> str:
    return secrets.token_urlsafe(16)


def _read_line(conn: socket.socket, limit: int) -> Optional[bytes]:
    """One line (without its newline) or ``None`` on end of file, timeout or a line too long."""
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = conn.recv(1)
        except OSError:
            return None
        if not chunk or len(data) >= limit:
            return None
        data += chunk
    return data[:-1].rstrip(b"\r")


class RemoteIO:
    """pdb's stdin and stdout, served to one client at a time on a listening socket.

    pdb writes its first lines (where it stopped) before anyone is attached: they are kept and
    sent when a client is accepted. ``readline`` is where pdb waits: it accepts a client first
    if none is attached.
    """

    def __init__(self, host: str, port: int, token: str, greeting: str) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(1)
        self.port: int = self._listener.getsockname()[1]
        self._token = token.encode()
        self._greeting = greeting
        self._conn: Optional[socket.socket] = None
        self._pending: list[bytes] = []
        self._closed = False
        self.encoding = "utf-8"

    # -- what pdb calls -------------------------------------------------------------------
    def write(self, text: str) -> int:
        data = text.encode("utf-8", "replace")
        if self._conn is None:
            self._pending.append(data)
            return len(text)
        try:
            self._conn.sendall(data)
        except OSError:
            self._drop()
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def readline(self, size: int = -1) -> str:
        if self._closed:
            return ""
        if self._conn is None:
            self._accept()
        conn = self._conn
        if conn is None:
            return ""
        try:
            conn.sendall(INPUT)
        except OSError:
            self._drop()
            return ""
        line = b""
        while not line.endswith(b"\n"):
            try:
                chunk = conn.recv(1)
            except OSError:
                chunk = b""
            if not chunk:
                self._drop()
                return line.decode("utf-8", "replace")  # "" at once: pdb's end of file, a detach
            line += chunk
        return line.decode("utf-8", "replace")

    # -- the session ----------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.settimeout(HELLO_TIMEOUT)
            hello = _read_line(conn, _HELLO_MAX)
            prefix = HELLO.encode() + b" "
            given = hello[len(prefix) :] if hello is not None and hello.startswith(prefix) else b""
            if hello is not None and hmac.compare_digest(given, self._token):
                try:
                    conn.settimeout(None)
                    conn.sendall(f"{ACCEPTED} {self._greeting}\n".encode())
                    conn.sendall(b"".join(self._pending))
                except OSError:
                    conn.close()
                    continue
                self._conn = conn
                return
            with contextlib.suppress(OSError):
                conn.sendall(f"{REFUSED}\n".encode())
            conn.close()
            time.sleep(REFUSAL_PAUSE)

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None

    def close(self, farewell: str = "") -> None:
        """End the session: say ``farewell`` to the client, close it and stop listening."""
        if farewell and self._conn is not None:
            self.write(farewell)
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.shutdown(socket.SHUT_RDWR)
        self._drop()
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()


def serve(host: str, port: int, greeting: str) -> tuple[RemoteIO, str]:
    """A listening :class:`RemoteIO` and its token. Raises ``OSError`` when it cannot listen."""
    token = new_token()
    return RemoteIO(host, port, token, greeting), token


def listen_address() -> tuple[str, int]:
    """The address to listen on: ``RANKSCOPE_BREAKPOINT_HOST``/``_PORT``, else 127.0.0.1, any port."""
    host = os.environ.get("RANKSCOPE_BREAKPOINT_HOST", "").strip() or "127.0.0.1"
    port_text = os.environ.get("RANKSCOPE_BREAKPOINT_PORT", "").strip()
    return host, int(port_text) if port_text.isdigit() else 0


def shown_host(host: str) -> str:
    """The host to print in the attach line: this node's name for a wildcard address."""
    if host in ("0.0.0.0", "::", ""):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host
