"""pdb served on a socket, for a rank that has no terminal (srun, pdsh, a background launcher).

Two kinds of socket:

- **By default, a Unix socket in the abstract namespace** (``@rankscope-pdb-PID-RANDOM``: no file,
  nothing left behind). Who may talk to it is decided by the kernel's word on the client
  (``SO_PEERCRED``): this process's own user and root; anyone else is answered
  :data:`NOT_YOURS` and closed before a byte of theirs is read. There is no secret to print, store
  or leak: ``rankscope attach --pid PID`` finds the socket among the process's own descriptors
  (which only its user and root may list) and checks that the process listening is ``PID``.
- **TCP, when the caller names an address or a port** (``host=``/``port=``,
  ``RANKSCOPE_BREAKPOINT_HOST``/``_PORT``): a 128-bit token (``secrets.token_urlsafe(16)``),
  compared in constant time, written to a 0600 file in the user's private runtime directory
  (:mod:`rankscope.inproc.runtime`), never printed; the attach line names the file.

The protocol, shared with ``rankscope attach`` (:mod:`rankscope.debug.client`):

1. The client connects and sends one line: ``RANKSCOPE-ATTACH 1`` (TCP: followed by the token).
2. The server answers one line: ``OK rank R pid P`` or an ``ERR ...`` line, then closes (wrong
   tokens are answered :data:`REFUSAL_PAUSE` seconds apart at most: no fast guessing). The rank
   keeps waiting for a client it accepts.
3. Then the stream is pdb's own text both ways. Each time pdb waits for a line, the server sends
   :data:`INPUT` (a NUL byte, which pdb's text never holds): the client shows the prompt, reads a
   line with line editing, and sends it. The client closing the connection (Ctrl-D) is an end of
   file for pdb: the rank detaches and goes on.

Each client has :data:`HELLO_TIMEOUT` seconds of wall-clock time, in all, to send its hello line;
clients are served side by side while they send it, so a slow one (one byte every few seconds)
never holds up the next. One session at a time: a client arriving during a session is not
answered until it ends.

Imported inside training processes: Python 3.9, standard library only.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import select
import socket
import struct
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

#: First line a client sends (TCP: followed by a space and the token).
HELLO = "RANKSCOPE-ATTACH 1"
#: The server's answers to it.
ACCEPTED = "OK"
REFUSED = "ERR wrong token"
NOT_YOURS = "ERR only this process's user and root may attach"
#: Sent each time pdb waits for a line.
INPUT = b"\x00"
#: Seconds of wall-clock time a client has, in all, to send its hello line.
HELLO_TIMEOUT = 5.0
#: Seconds between two answers to a wrong token (no fast guessing); other clients are served meanwhile.
REFUSAL_PAUSE = 0.5
#: Longest hello line the server reads.
_HELLO_MAX = 256
#: Clients sending their hello at once; beyond this the one that came first is dropped.
_MAX_PENDING = 32
#: Abstract Unix socket names of stopped ranks start with this, then ``PID-``.
UNIX_PREFIX = "rankscope-pdb-"


def new_token() -> str:
    return secrets.token_urlsafe(16)


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket, as the kernel saw it."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


class _Hello:
    """A client still sending its hello line."""

    def __init__(self, conn: socket.socket, deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        self.data = b""


class RemoteIO:
    """pdb's stdin and stdout, served to one client at a time on a listening socket.

    pdb writes its first lines (where it stopped) before anyone is attached: they are kept and
    sent when a client is accepted. ``readline`` is where pdb waits: it accepts a client first
    if none is attached. ``token`` is ``None`` for a Unix socket (the peer's uid decides).
    """

    def __init__(self, listener: socket.socket, token: Optional[str], greeting: str) -> None:
        self._listener = listener
        self._listener.setblocking(False)
        self._token = token.encode() if token is not None else None
        self._greeting = greeting
        self._conn: Optional[socket.socket] = None
        self._pending: list[bytes] = []
        self._refusals: list[tuple[float, socket.socket]] = []  # (when to answer, client)
        self._next_refusal = 0.0
        self._closed = False
        self.token_file: Optional[str] = None
        self.encoding = "utf-8"
        self.port: int = int(listener.getsockname()[1]) if listener.family != socket.AF_UNIX else 0

    @property
    def attached(self) -> bool:
        """Whether a client is attached now."""
        return self._conn is not None

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
    def _may_talk(self, conn: socket.socket) -> bool:
        """A Unix socket's client must be this process's user or root; any TCP client may try a token."""
        if self._token is not None:
            return True
        try:
            uid = peer_credentials(conn)[1]
        except OSError:
            return False
        return uid in (os.geteuid(), 0)

    def _hello_accepted(self, line: bytes) -> bool:
        prefix = HELLO.encode()
        if self._token is None:
            return line == prefix or line.startswith(prefix + b" ")
        given = line[len(prefix) + 1 :] if line.startswith(prefix + b" ") else b""
        return hmac.compare_digest(given, self._token)

    def _accept(self) -> None:
        """Serve hellos side by side, each within its own deadline, until one is accepted."""
        waiting: list[_Hello] = []
        try:
            while not self._closed and self._conn is None:
                now = time.monotonic()
                for late in [each for each in waiting if each.deadline <= now]:
                    waiting.remove(late)
                    _close(late.conn)
                while self._refusals and self._refusals[0][0] <= now:
                    _refuse(self._refusals.pop(0)[1])
                due = [each.deadline for each in waiting] + [when for when, _ in self._refusals[:1]]
                timeout = min(due, default=now + 60.0) - now
                try:
                    readable = select.select(
                        [self._listener] + [each.conn for each in waiting], [], [], timeout
                    )[0]
                except (OSError, ValueError):
                    return  # the listener was closed
                for ready in readable:
                    if ready is self._listener:
                        self._take_client(waiting)
                    else:
                        hello = next(each for each in waiting if each.conn is ready)
                        if self._read_hello(hello):
                            waiting.remove(hello)
                    if self._conn is not None:
                        return
        finally:
            for each in waiting:
                _close(each.conn)
            while self._refusals:
                _refuse(self._refusals.pop(0)[1])

    def _take_client(self, waiting: list[_Hello]) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:  # BlockingIOError: another wake-up took it; or the listener is gone
            return
        if not self._may_talk(conn):
            with contextlib.suppress(OSError):
                conn.setblocking(False)
                conn.send(f"{NOT_YOURS}\n".encode())
            _close(conn)
            return
        conn.setblocking(False)
        if len(waiting) >= _MAX_PENDING:
            _close(waiting.pop(0).conn)
        waiting.append(_Hello(conn, time.monotonic() + HELLO_TIMEOUT))

    def _read_hello(self, hello: _Hello) -> bool:
        """Read what ``hello``'s client sent; True once it is done with (accepted, refused, gone)."""
        try:
            chunk = hello.conn.recv(_HELLO_MAX)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        hello.data += chunk
        if not chunk or (b"\n" not in hello.data and len(hello.data) > _HELLO_MAX):
            _close(hello.conn)
            return True
        if b"\n" not in hello.data:
            return False
        line = hello.data.split(b"\n", 1)[0].rstrip(b"\r")
        conn = hello.conn
        if self._hello_accepted(line):
            try:
                conn.setblocking(True)
                conn.sendall(f"{ACCEPTED} {self._greeting}\n".encode())
                conn.sendall(b"".join(self._pending))
            except OSError:
                _close(conn)
                return True
            self._conn = conn
            return True
        # A wrong token is answered no sooner than REFUSAL_PAUSE after the one before (no fast
        # guessing), without keeping the other clients waiting meanwhile.
        when = max(time.monotonic(), self._next_refusal)
        self._next_refusal = when + REFUSAL_PAUSE
        self._refusals.append((when, conn))
        if len(self._refusals) > _MAX_PENDING:
            _close(self._refusals.pop(0)[1])
        return True

    def _drop(self) -> None:
        if self._conn is not None:
            _close(self._conn)
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
        _close(self._listener)
        if self.token_file is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.token_file)
            self.token_file = None


def _refuse(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.send(f"{REFUSED}\n".encode())
    _close(conn)


def _close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.close()


def serve_unix(greeting: str) -> tuple[RemoteIO, str]:
    """A :class:`RemoteIO` on a fresh abstract Unix socket, and its name (without the leading NUL)."""
    name = f"{UNIX_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
        listener.listen(8)
    except OSError:
        listener.close()
        raise
    return RemoteIO(listener, None, greeting), name


def serve_tcp(host: str, port: int, greeting: str) -> tuple[RemoteIO, str]:
    """A :class:`RemoteIO` listening on ``host:port``, and its token. Raises ``OSError`` when it cannot listen."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(8)
    except (OSError, OverflowError):
        listener.close()
        raise
    token = new_token()
    return RemoteIO(listener, token, greeting), token


def write_token_file(server: RemoteIO, token: str) -> str:
    """The token in a 0600 file of this user's private runtime directory; its path."""
    from rankscope.inproc import runtime

    directory = runtime.runtime_dir(os.environ, os.getuid())
    dir_fd = runtime.open_private_dir(directory)
    try:
        name = runtime.file_name(socket.gethostname(), os.getpid(), f"pdb-{server.port}.token")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
        fd = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
        )
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(token + "\n")
    finally:
        os.close(dir_fd)
    server.token_file = os.path.join(directory, name)
    return server.token_file


def listen_address() -> tuple[Optional[str], Optional[int]]:
    """``RANKSCOPE_BREAKPOINT_HOST``/``_PORT`` (``None`` where unset: a Unix socket unless one is set)."""
    host = os.environ.get("RANKSCOPE_BREAKPOINT_HOST", "").strip() or None
    port_text = os.environ.get("RANKSCOPE_BREAKPOINT_PORT", "").strip()
    return host, int(port_text) if port_text.isdigit() else None


def shown_host(host: str) -> str:
    """The host to print in the attach line: this node's name for a wildcard address."""
    if host in ("0.0.0.0", "::", ""):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host
