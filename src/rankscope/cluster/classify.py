"""How far a node got: one node's raw outcome (exit code, output, timed out or not) -> its stage.

Pure: no process, no clock, no file. :func:`classify` is what every transport's outcome goes
through; ssh's ``-v`` lines and the script's start and exit markers (see
:mod:`rankscope.cluster.transports`) tell the stages apart:

- the script's exit marker came back: ``ok``, or ``command failed`` with its status;
- no marker and ssh/pdsh said why: ``unreachable`` or ``auth refused`` (the line that told us
  is the reason);
- killed at the deadline: ``timeout`` when the command had started, or when ssh had connected
  ("connected, but the login had not finished") or logged in ("logged in, but the command had
  not started"); ``unreachable`` when nothing at all came back.

Callers such as ``stacks`` refine ``command failed`` by the remote exit code
(:mod:`rankscope.cluster.stacks_remote`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from rankscope.cluster.transports import EXIT_MARKER, START_MARKER
from rankscope.folding import duration
from rankscope.model import Stage


@dataclass
class NodeResult:
    """One node's answer: its stage, and what it printed (ssh's chatter and our markers removed).

    The fields, in this order, are one entry of the ``nodes`` list of ``rankscope.exec/1``.
    """

    node: str
    stage: Stage
    #: The remote command's exit status; None when it never reported one (transport failure, timeout).
    returncode: Optional[int]
    stdout: str
    stderr: str
    reason: str = ""
    hint: str = ""
    elapsed: float = field(default=0.0, metadata={"round": 3})

    @property
    def ok(self) -> bool:
        return self.stage is Stage.OK


#: ssh/pdsh/srun messages -> (stage, hint). First match wins, checked in order.
_TRANSPORT_MESSAGES: tuple[tuple[re.Pattern[str], Stage, str], ...] = (
    (
        re.compile(
            r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|No \S+ host key is known"
        ),
        Stage.AUTH_REFUSED,
        "the node's host key is not in known_hosts: add it (ssh-keyscan NODE >> ~/.ssh/known_hosts) "
        "or, on a trusted network only, pass --insecure-no-host-key-check",
    ),
    (
        re.compile(r"Permission denied|Too many authentication failures|Authentication failed"),
        Stage.AUTH_REFUSED,
        "passwordless login is needed: check your key with `ssh -o BatchMode=yes NODE true`",
    ),
    (
        re.compile(
            r"Connection refused|Connection timed out|No route to host|Network is unreachable|"
            r"Could not resolve hostname|Name or service not known|Temporary failure in name resolution|"
            r"kex_exchange_identification|Connection reset|Connection closed by|port \d+: Operation timed out"
        ),
        Stage.UNREACHABLE,
        "check the node is up and sshd listens: `ssh NODE date`",
    ),
)

#: pdsh's own summary line ("pdsh@host: node: ssh exited with exit code 255") says less than ssh's.
_PDSH_SUMMARY = re.compile(r"^pdsh@\S+: \S+: ssh exited with exit code \d+$")

#: ssh -v lines that tell how far a login got; they and the rest of ssh's chatter are removed.
_SSH_CONNECTED = "Connection established."
_SSH_AUTHENTICATED = "Authenticated to "
_SSH_CHATTER = re.compile(
    r"^(?:\S+: )?(?:debug\d: |OpenSSH_|Authenticated to |Transferred: sent |Bytes per second: )"
)


class Login(NamedTuple):
    """How far an ssh login got, from its ``-v`` lines."""

    connected: bool = False
    authenticated: bool = False


class Markers(NamedTuple):
    """What the script's marker lines said: did it start, its exit status, the rest of stderr."""

    started: bool
    status: Optional[int]
    rest: str


def last_line(text: str) -> str:
    """The last line worth showing: pdsh's summary only when nothing else was said."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    useful = [line for line in lines if not _PDSH_SUMMARY.match(line)]
    return (useful or lines or [""])[-1]


def strip_ssh_debug(stderr: str) -> tuple[Login, str]:
    """Remove ``ssh -v`` lines; report whether TCP connected and whether login succeeded."""
    if "debug1: " not in stderr:
        return Login(), stderr
    connected = authenticated = False
    kept = []
    for line in stderr.splitlines():
        if _SSH_CHATTER.match(line):
            connected = connected or _SSH_CONNECTED in line
            authenticated = authenticated or _SSH_AUTHENTICATED in line
            continue
        kept.append(line)
    return Login(connected, authenticated), "\n".join(kept) + ("\n" if kept else "")


def split_markers(stderr: str) -> Markers:
    """Strip our marker lines: did the remote start, its exit status if it finished, the rest of stderr."""
    started = False
    status: Optional[int] = None
    kept: list[str] = []
    for line in stderr.splitlines():
        if START_MARKER in line:
            started = True
            continue
        if EXIT_MARKER in line:
            tail = line.split(EXIT_MARKER, 1)[1].strip()
            status = int(tail) if tail.isdigit() else status
            continue
        kept.append(line)
    rest = "\n".join(kept)
    return Markers(started, status, rest + "\n" if rest else "")


def started_node(stderr: str) -> str:
    """The node name a start marker carries (set in srun steps), or ''."""
    for line in stderr.splitlines():
        if START_MARKER in line:
            return line.split(START_MARKER, 1)[1].strip()
    return ""


def clean_reason(message: str, node: str) -> str:
    """A transport's line without the prefixes that repeat the node (pdsh's ``pdsh@host: node: ``)."""
    message = re.sub(r"^pdsh@\S+:\s*", "", message)
    if message.startswith(f"{node}: "):
        message = message[len(node) + 2 :]
    return message


def _timed_out(
    node: str, stdout: str, login: Login, markers: Markers, deadline: float, elapsed: float
) -> NodeResult:
    within = duration(deadline)
    if markers.started:
        stage, reason = Stage.TIMEOUT, f"command still running after {within}s"
        hint = "the node answered but the command hangs: raise --node-timeout or look at the node"
    elif login.authenticated:
        stage, reason = Stage.TIMEOUT, f"logged in, but the command had not started after {within}s"
        hint = "slow shell start-up or --remote-setup on the node? try `ssh NODE true`"
    elif login.connected:
        stage, reason = Stage.TIMEOUT, f"connected, but the login had not finished after {within}s"
        hint = "sshd on the node is slow or overloaded (or DNS/LDAP lookups hang): raise --node-timeout"
    else:
        stage, reason = Stage.UNREACHABLE, f"never answered within {within}s"
        hint = "the node or a firewall drops traffic: check it is up (`ping`, `ssh NODE date`)"
    return NodeResult(node, stage, None, stdout, markers.rest, reason, hint, elapsed)


def _transport_failed(
    node: str, returncode: Optional[int], stdout: str, markers: Markers, elapsed: float
) -> NodeResult:
    # The command never reported its exit status: the transport failed on the way.
    rest = markers.rest
    for pattern, stage, hint in _TRANSPORT_MESSAGES:
        match = pattern.search(rest)
        if match:
            # The line that told us, e.g. "ssh: connect to host n1 port 22: Connection refused".
            line = rest[rest.rfind("\n", 0, match.start()) + 1 :].split("\n", 1)[0].strip()
            return NodeResult(node, stage, None, stdout, rest, clean_reason(line, node), hint, elapsed)
    message = last_line(rest) or f"exited with code {returncode} before running the command"
    stage = Stage.COMMAND_FAILED if markers.started else Stage.TRANSPORT_ERROR
    hint = "run the transport by hand to see why: `ssh NODE date`"
    return NodeResult(node, stage, None, stdout, rest, clean_reason(message, node), hint, elapsed)


def classify(
    node: str,
    returncode: Optional[int],
    stdout: str,
    stderr: str,
    timed_out: bool,
    deadline: float,
    elapsed: float,
) -> NodeResult:
    """One node's outcome -> its NodeResult with its stage (a pure function of its arguments).

    ``returncode`` is the transport's (ssh, pdsh; None for an srun task, whose status only the
    exit marker carries), ``deadline`` the node's budget in seconds (for the reason's text).
    """
    login, stderr = strip_ssh_debug(stderr)
    markers = split_markers(stderr)
    if timed_out:
        return _timed_out(node, stdout, login, markers, deadline, elapsed)
    if markers.status is None:
        return _transport_failed(node, returncode, stdout, markers, elapsed)
    if markers.status == 0:
        return NodeResult(node, Stage.OK, 0, stdout, markers.rest, elapsed=elapsed)
    tail = clean_reason(last_line(markers.rest), node) if markers.rest.strip() else ""
    reason = f"exit {markers.status}" + (f": {tail}" if tail else "")
    return NodeResult(
        node, Stage.COMMAND_FAILED, markers.status, stdout, markers.rest, reason, elapsed=elapsed
    )
