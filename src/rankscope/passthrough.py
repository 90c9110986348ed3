"""A command run with its output passed through as it comes, each line optionally prefixed.

The engine of `rankscope prefix` (every line labelled ``[host:rank]``) and `rankscope rerun` (a tap
sees every chunk, a timeout ends the command). The command runs through :func:`rankscope.lifetime.start`
in a process group of its own (not a session: it keeps the terminal, which it is handed as the
foreground group), unmarked (it is the user's program, not rankscope's work: the guardian leaves it
alone); signals to rankscope are passed on to its group; when it exits, what it left running gets
:data:`DRAIN` seconds to finish its output, then the group is ended and reading stops.

Shared module: stdlib, ``errors``, ``lifetime``, ``model`` and ``ranks`` only.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Callable, Optional

from rankscope import lifetime
from rankscope.errors import BadInputError, ExitCode, MissingToolError
from rankscope.lifetime import TERM_GRACE, signal_group
from rankscope.model import rank_label
from rankscope.ranks import current_rank

#: A line longer than this is written in pieces of this size, each with the prefix and a newline:
#: the same cut as the logs readers (``rankscope.logs.sources.MAX_LINE``), so memory stays bounded.
PIECE = 4 << 20
#: After CMD exits, how long what it left running may still hold its output open before the
#: group is ended (SIGTERM, SIGKILL after TERM_GRACE) and reading stops.
DRAIN = 0.5
#: Signals passed on to CMD's process group.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def prefix_label(short_host: bool, rank_override: Optional[int]) -> str:
    """``[host:rank] `` from the launcher's environment; ``short_host``: the host's digits only."""
    rank = current_rank()
    host = rank.host
    if short_host:
        host = re.sub(r"[^0-9]", "", host) or host
    number = rank_override if rank_override is not None else rank.rank
    return f"[{rank_label(host, number)}] "


class _Lines:
    """One output stream of CMD: bytes in, prefixed whole lines (or PIECE-long pieces) out."""

    def __init__(self, sink: IO[bytes], prefix: bytes) -> None:
        self.sink = sink
        self.prefix = prefix
        self.partial = bytearray()
        self.broken = False

    def _write(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            self.sink.write(data)
            self.sink.flush()
        except (BrokenPipeError, ValueError, OSError):
            # Our reader went away (`| head`): stop writing; closing the child's pipe gives it
            # SIGPIPE on its next write, as if it had been piped to head itself.
            self.broken = True

    def feed(self, chunk: bytes) -> None:
        if not self.prefix:  # nothing to put in front: pass it through as it comes (prompts, progress bars)
            self._write(chunk)
            return
        self.partial += chunk
        end = self.partial.rfind(b"\n")
        if end >= 0:
            lines = bytes(self.partial[: end + 1])
            del self.partial[: end + 1]
            self._write(b"".join(self.prefix + line + b"\n" for line in lines[:-1].split(b"\n")))
        while len(self.partial) >= PIECE:
            self._write(self.prefix + bytes(self.partial[:PIECE]) + b"\n")
            del self.partial[:PIECE]

    def close(self) -> None:
        if self.partial:
            self._write(self.prefix + bytes(self.partial))
            self.partial.clear()


def _hand_terminal(to_pgid: int) -> Optional[int]:
    """If rankscope's group is the terminal's foreground group, make ``to_pgid`` it; the old one."""
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
            return None
        os.tcsetpgrp(fd, to_pgid)
    except (OSError, ValueError, AttributeError):
        return None
    signal_group(to_pgid, signal.SIGCONT)  # in case it read the terminal before it was its own
    return os.getpgrp()


def _take_terminal_back(pgid: int) -> None:
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # we are a background group by now
    try:
        with contextlib.suppress(OSError, ValueError):
            os.tcsetpgrp(sys.stdin.fileno(), pgid)
    finally:
        signal.signal(signal.SIGTTOU, old)


def run_prefixed(command: list[str], label: str) -> int:
    """Run ``command`` in a process group of its own, prefix its output; its exit status.

    Signals to rankscope reach the whole group; when the command exits, what it left running
    gets DRAIN seconds to finish its output, then the group is ended and reading stops.
    """
    return run_passing_through(command, label).code


@dataclass(frozen=True)
class Ran:
    #: The command's exit status (128+N when signal N ended it).
    code: int
    #: ``timeout`` ended it.
    timed_out: bool = False


def run_passing_through(
    command: list[str],
    label: str = "",
    env: Optional[Mapping[str, str]] = None,
    tap: Optional[Callable[[bytes], None]] = None,
    timeout: Optional[float] = None,
    stdout: Optional[IO[bytes]] = None,
) -> Ran:
    """:func:`run_prefixed` with an environment, a ``tap`` that sees every chunk of output (stdout
    and stderr in the order they came, unprefixed), and a ``timeout`` in seconds after which the
    group is ended (SIGTERM, SIGKILL after TERM_GRACE); the command's stdout goes to ``stdout``
    (default: rankscope's).
    """
    # Signals are caught before CMD starts (it gets the default handlers back at exec): one that
    # comes before CMD runs is passed on as soon as it does.
    group: list[int] = []
    early: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if group:
            signal_group(group[0], signum)
        else:
            early.append(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    try:
        child = lifetime.start(
            command,
            env=env,
            session=False,
            capture=None,
            mark=False,
            stdin=None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except FileNotFoundError:
        raise MissingToolError(command[0], "check the command name and PATH") from None
    except PermissionError:
        raise BadInputError(f"{command[0]} is not executable", "check its permissions") from None
    group.append(child.pid)
    terminal = _hand_terminal(child.pid)  # Ctrl-C at a terminal then reaches CMD's group once
    for early_signal in early:
        signal_group(child.pid, early_signal)
    out, err = child.process.stdout, child.process.stderr
    assert out is not None and err is not None
    prefix = label.encode()
    selector = selectors.DefaultSelector()
    pipes = {out.fileno(): out, err.fileno(): err}
    streams = {
        out.fileno(): _Lines(stdout if stdout is not None else sys.stdout.buffer, prefix),
        err.fileno(): _Lines(sys.stderr.buffer, prefix),
    }
    for fd in streams:
        selector.register(fd, selectors.EVENT_READ)
    pidfd = _pidfd(child.pid)
    if pidfd is not None:
        selector.register(pidfd, selectors.EVENT_READ)
    try:
        timed_out = _pump(selector, streams, pipes, child, pidfd, tap, timeout)
    finally:
        for fd, lines in streams.items():
            lines.close()
            pipes[fd].close()
        if pidfd is not None:
            os.close(pidfd)
        selector.close()
        if terminal is not None:
            _take_terminal_back(terminal)
    code = child.reap()  # SIGKILL to the group first: nothing of CMD's group outlives prefix
    if code < 0:
        return Ran(128 - code, timed_out)
    return Ran(ExitCode.OK if code == 0 else code, timed_out)


def _pidfd(pid: int) -> Optional[int]:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # no pidfds (Linux < 5.3): look at the child every 0.1 s


def _pump(
    selector: selectors.BaseSelector,
    streams: dict[int, _Lines],
    pipes: dict[int, IO[bytes]],
    child: lifetime.Child,
    pidfd: Optional[int],
    tap: Optional[Callable[[bytes], None]] = None,
    timeout: Optional[float] = None,
) -> bool:
    """Copy output until every pipe is closed, or CMD has exited and its leftovers were ended.

    True when ``timeout`` ran out first (the group was then ended).
    """
    open_fds = set(streams)
    exited_at: Optional[float] = None
    term_at = kill_at = stop_at = float("inf")
    timed_out = False
    if timeout is not None:
        term_at = time.monotonic() + timeout
    while open_fds:
        now = time.monotonic()
        if exited_at is None and child.process.poll() is not None:
            exited_at = now
            term_at = min(term_at, now + DRAIN)
        if now >= term_at:  # CMD is gone, something it started still holds the pipes (or time is up)
            timed_out = timed_out or exited_at is None
            term_at = float("inf")
            signal_group(child.pid, signal.SIGTERM)
            kill_at = now + TERM_GRACE
        if now >= kill_at:
            kill_at = float("inf")
            signal_group(child.pid, signal.SIGKILL)
            stop_at = now + DRAIN  # a holder outside the group (it made its own): stop reading
        if now >= stop_at:
            return timed_out
        if exited_at is None and term_at == kill_at == float("inf"):
            wait = None if pidfd is not None else 0.1
        else:
            wait = max(0.0, min(term_at, kill_at, stop_at) - now)
            if exited_at is None and pidfd is None:
                wait = min(wait, 0.1)
        for key, _ in selector.select(wait):
            if key.fd == pidfd:
                selector.unregister(pidfd)
                continue
            try:
                chunk = os.read(key.fd, 1 << 16)
            except OSError:
                chunk = b""
            if chunk:
                if tap is not None:
                    tap(chunk)
                streams[key.fd].feed(chunk)
            if not chunk or streams[key.fd].broken:
                selector.unregister(key.fd)
                open_fds.discard(key.fd)
                pipes[key.fd].close()  # our reader went away: the command gets SIGPIPE, as under `| head`
    return timed_out
