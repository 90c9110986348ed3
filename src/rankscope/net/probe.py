"""Port probes and a bounded listener: the only code here that opens sockets to other hosts.

:func:`probe` connects to every target at once (non-blocking connects on one selector, no thread
per probe), each bounded by one timeout, and tells a reset (refused) from silence (filtered) from
a name that does not resolve. Names are resolved first, each in a daemon thread bounded by the
same timeout (getaddrinfo has no non-blocking form). :func:`open_listener` + :func:`serve` are
``net listen``: accept and close, until a deadline.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

from rankscope.errors import BadInputError
from rankscope.net.verdicts import ProbeResult, Verdict

#: Sockets open at once; the rest wait for a slot (the open-files limit is often 1024).
MAX_PARALLEL = 256
#: How soon a refused probe is tried again in ``retry_refused`` mode (the peer's listener may not be up
#: yet): doubling from RETRY_INTERVAL up to RETRY_MAX, so that 128 nodes waiting for late peers do not
#: flood each other with connects (16,256 targets retried every 0.2 s are 80,000 connects a second).
RETRY_INTERVAL = 0.2
RETRY_MAX = 1.6

#: connect() errors that mean "no way there": no route, an ICMP unreachable, a `prohibit` route or a
#: local firewall rule (EACCES/EPERM), a `blackhole` route (EINVAL).
_NO_ROUTE = {
    errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EACCES, errno.EPERM, errno.EADDRNOTAVAIL, errno.EINVAL,
}  # fmt: skip


@dataclass(frozen=True)
class Target:
    host: str
    port: int


def parse_target(text: str, default_port: Optional[int] = None) -> Target:
    """``host:port``, ``[v6addr]:port``, or ``host`` with ``default_port``."""
    host, port_text = text, ""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    if not port_text and default_port is not None:
        port_text = str(default_port)
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadInputError(f"not a HOST:PORT: {text!r}", "e.g. node02:29500 or [fd00::2]:29500")
    return Target(host, int(port_text))


def _numeric(host: str) -> Optional[tuple[int, str]]:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return (socket.AF_INET if ip.version == 4 else socket.AF_INET6), str(ip)


def resolve_all(names: Sequence[str], timeout: float) -> dict[str, tuple[Optional[tuple[int, str]], str]]:
    """name -> ((family, address) or None, error text), every name within ``timeout`` seconds together.

    A name the resolver has not answered by then counts as unresolved; its daemon thread is left to
    finish on its own (it holds nothing).
    """
    answers: dict[str, tuple[Optional[tuple[int, str]], str]] = {}
    lock = threading.Lock()

    def lookup(name: str) -> None:
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
            family, _, _, _, sockaddr = infos[0]
            answer: tuple[Optional[tuple[int, str]], str] = ((int(family), str(sockaddr[0])), "")
        except (OSError, UnicodeError) as exc:
            answer = (None, getattr(exc, "strerror", None) or str(exc))
        with lock:
            answers[name] = answer

    threads = []
    for name in dict.fromkeys(names):
        numeric = _numeric(name)
        if numeric is not None:
            answers[name] = (numeric, "")
            continue
        thread = threading.Thread(target=lookup, args=(name,), daemon=True)
        thread.start()
        threads.append(thread)
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    with lock:
        result = dict(answers)
    for name in dict.fromkeys(names):
        result.setdefault(name, (None, f"the resolver did not answer within {timeout:g}s"))
    return result


def _verdict_of(code: int) -> Verdict:
    if code == 0:
        return Verdict.OPEN
    if code == errno.ECONNREFUSED:
        return Verdict.REFUSED
    if code == errno.ETIMEDOUT:
        return Verdict.FILTERED
    if code in _NO_ROUTE:
        return Verdict.NO_ROUTE
    return Verdict.ERROR


#: The detail of a probe that met itself (see :func:`_met_itself`).
ITSELF = "connected to itself (source port = destination port): nothing listens there"


def _met_itself(sock: socket.socket) -> bool:
    """A connect to a local port nothing listens on, from that very port (the kernel chose it as the
    ephemeral source), meets itself: TCP's simultaneous open "succeeds" with no listener. Such a
    socket is reset on close (SO_LINGER 0), so no TIME_WAIT keeps the port busy for the job."""
    try:
        itself = bool(sock.getsockname()[:2] == sock.getpeername()[:2])
    except OSError:
        return False
    if itself:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return itself


def probe(
    targets: Sequence[Target],
    timeout: float = 3.0,
    retry_refused: bool = False,
    listener: Optional[socket.socket] = None,
    on_accept: Optional[Callable[[str], None]] = None,
    latest: Optional[float] = None,
) -> list[ProbeResult]:
    """One result per target, in order; each connect gets ``timeout`` seconds, all of them at once.

    Names are resolved first, together, within ``timeout``. Up to :data:`MAX_PARALLEL` connects are
    in flight at a time; the others start as slots free up, each with its own ``timeout``.
    ``retry_refused``: ``timeout`` is one window for everything instead, and a refused probe is
    tried again until the window ends (net check starts every node's listener at about the same
    time; a peer may not listen yet). The window starts again whenever a peer shows up, by its first
    connection to ``listener`` or a refused probe that opens, up to ``latest`` (a time.monotonic()
    value): nodes whose start is spread over more than one window (many logins on a busy head
    node) still find each other, and when every peer is up the window runs out as before.
    ``listener``: a listening socket served in the same loop meanwhile (accepted and closed;
    ``on_accept`` gets the peer).
    """
    started = time.monotonic()
    window_end = started + timeout if retry_refused else None
    seen: set[str] = set()

    def news() -> None:
        """A peer showed up: give the ones still missing another window (never past ``latest``)."""
        nonlocal window_end
        if window_end is not None:
            window_end = max(window_end, min(time.monotonic() + timeout, latest or window_end))

    def accepted(peer: str) -> None:
        host = peer.rpartition(":")[0]
        if host not in seen:
            seen.add(host)
            news()
        if on_accept is not None:
            on_accept(peer)

    resolved = resolve_all([t.host for t in targets], timeout)
    results: list[Optional[ProbeResult]] = [None] * len(targets)
    waiting: list[tuple[float, int]] = []  # (start at, target index)
    refused_before: set[int] = set()
    met_itself: set[int] = set()  # connected to itself: refused, said so
    tries: dict[int, int] = {}  # refused probes: how often, for the back-off
    deadlines: dict[socket.socket, tuple[float, int]] = {}  # in flight: (deadline, target index)

    def finish(index: int, verdict: Verdict, detail: str) -> None:
        target = targets[index]
        address = resolved[target.host][0]
        elapsed = time.monotonic() - started
        results[index] = ProbeResult(
            target.host, target.port, verdict, address[1] if address else "", detail, elapsed
        )

    def conclude(index: int, code: int) -> None:
        verdict = _verdict_of(code)
        if verdict is Verdict.OPEN and index in refused_before:
            news()
        if verdict is Verdict.REFUSED and window_end is not None:
            refused_before.add(index)
            tries[index] = tries.get(index, 0) + 1
            # queued even past the window's end: peers may stretch it; if not, the loop ends first
            waiting.append(
                (time.monotonic() + min(RETRY_MAX, RETRY_INTERVAL * 2 ** (tries[index] - 1)), index)
            )
            return
        detail = ITSELF if index in met_itself else "" if code == 0 else os.strerror(code)
        if code == errno.EINVAL:
            detail += " (a blackhole route)"
        finish(index, verdict, detail)

    for index, target in enumerate(targets):
        answer, error = resolved[target.host]
        if answer is None:
            finish(index, Verdict.UNRESOLVED, error)
        else:
            waiting.append((0.0, index))
    selector = selectors.DefaultSelector()
    if listener is not None:
        selector.register(listener, selectors.EVENT_READ, None)
    try:
        # net check (retry_refused with a listener): stay for the whole window, which peers may stretch
        while waiting or deadlines or (listener is not None and window_end is not None):
            now = time.monotonic()
            if window_end is not None and now >= window_end:
                break
            ready = sorted(w for w in waiting if w[0] <= now)
            for item in ready[: max(0, MAX_PARALLEL - len(deadlines))]:
                waiting.remove(item)
                index = item[1]
                family, address = resolved[targets[index].host][0] or (socket.AF_INET, "")
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setblocking(False)
                code = sock.connect_ex((address, targets[index].port))
                code = _refused_if_itself(sock, code, index, met_itself)
                if code in (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
                    selector.register(sock, selectors.EVENT_WRITE, index)
                    deadlines[sock] = (window_end if window_end is not None else now + timeout, index)
                else:
                    sock.close()
                    conclude(index, code)
            now = time.monotonic()
            for sock, (deadline, index) in list(deadlines.items()):
                if deadline <= now:
                    selector.unregister(sock)
                    sock.close()
                    del deadlines[sock]
                    if index in refused_before:  # a retry cut short by the window's end: still refused
                        waiting.append((now + RETRY_INTERVAL, index))
                    else:
                        finish(index, Verdict.FILTERED, f"never answered within {timeout:g}s")
            if window_end is not None and now >= window_end:
                break
            wakes = [deadline for deadline, _ in deadlines.values()]
            if window_end is not None:
                wakes.append(window_end)
            if waiting and len(deadlines) < MAX_PARALLEL:
                wakes.append(min(w[0] for w in waiting))
            if not wakes:
                continue
            for key, _events in selector.select(max(0.0, min(wakes) - time.monotonic())):
                if key.data is None:
                    _accept(key.fileobj, accepted)  # type: ignore[arg-type]
                    continue
                sock = key.fileobj  # type: ignore[assignment]
                assert isinstance(sock, socket.socket)
                code = _refused_if_itself(
                    sock, sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), key.data, met_itself
                )
                selector.unregister(sock)
                sock.close()
                del deadlines[sock]
                conclude(key.data, code)
    finally:
        in_flight = {index for _deadline, index in deadlines.values()}
        for sock in deadlines:
            sock.close()
        selector.close()
    for index, result in enumerate(results):
        if result is None and index in refused_before:
            until = f"refused until the end of the {timeout:g}s window"
            finish(index, Verdict.REFUSED, f"{until}; {ITSELF}" if index in met_itself else until)
        elif result is None and index in in_flight:  # still unanswered when the window ended
            finish(index, Verdict.FILTERED, f"never answered within {timeout:g}s")
        elif result is None:  # more targets than sockets at once, and the window ran out first
            finish(index, Verdict.ERROR, f"not probed: the {timeout:g}s window ran out first")
    return [r for r in results if r is not None]


def _refused_if_itself(sock: socket.socket, code: int, index: int, met_itself: set[int]) -> int:
    """``code``, or ECONNREFUSED for a socket that connected to itself (noted in ``met_itself``)."""
    if code == 0 and _met_itself(sock):
        met_itself.add(index)
        return errno.ECONNREFUSED
    met_itself.discard(index)
    return code


def _accept(listener: socket.socket, on_accept: Optional[Callable[[str], None]]) -> None:
    try:
        conn, peer = listener.accept()
    except OSError:
        return
    conn.close()
    if on_accept is not None:
        on_accept(f"{peer[0]}:{peer[1]}")


def open_listener(bind: str, port: int) -> socket.socket:
    """A listening TCP socket on ``bind``:``port`` (port 0: any free port). Raises OSError as the kernel says."""
    numeric = _numeric(bind)
    family = numeric[0] if numeric else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def serve(
    listener: socket.socket,
    until: float,
    count: Optional[int] = None,
    on_accept: Optional[Callable[[str], None]] = None,
) -> int:
    """Accept (and close) connections until ``until`` (a time.monotonic() value) or ``count`` of them."""
    accepted = 0

    def seen(peer: str) -> None:
        nonlocal accepted
        accepted += 1
        if on_accept is not None:
            on_accept(peer)

    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        while count is None or accepted < count:
            left = until - time.monotonic()
            if left <= 0:
                break
            for key, _ in selector.select(left):
                _accept(key.fileobj, seen)  # type: ignore[arg-type]
    return accepted


def source_address(peer: str, timeout: float = 2.0) -> Optional[str]:
    """The local address the kernel would send from to reach ``peer`` (a UDP connect sends nothing)."""
    answer, _error = resolve_all([peer], timeout)[peer]
    if answer is None:
        return None
    family, address = answer
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((address, 9))
        except OSError:
            return None
        return str(sock.getsockname()[0])


def hostname_addresses(timeout: float = 2.0) -> tuple[str, Optional[list[str]]]:
    """This host's name and every address it resolves to (None when it does not resolve)."""
    name = socket.gethostname()
    found: dict[str, None] = {}
    box: list[Optional[list[str]]] = [None]

    def lookup() -> None:
        try:
            for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM):
                found[str(info[4][0])] = None
            box[0] = list(found)
        except (OSError, UnicodeError):
            box[0] = None

    thread = threading.Thread(target=lookup, daemon=True)
    thread.start()
    thread.join(timeout)
    return name, box[0]
