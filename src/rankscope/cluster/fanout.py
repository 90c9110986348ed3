"""Run one remote script on many nodes at once, with deadlines, and turn each outcome into data.

Every node ends as a :class:`NodeResult` with a ``stage``: ``ok`` or how far it got
(the "date, then pgrep, then py-spy" ladder): ``unreachable``, ``auth refused``,
``timeout``, ``command failed``; callers such as ``stacks`` refine ``command failed``
by the remote exit code (``no rankscope there``, ``no job found``, ``dump failed``).
Nothing here raises for a node: one bad node never hides the others.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol

from rankscope.cluster.transports import EXIT_MARKER, START_MARKER, SrunStep

OK = "ok"
UNREACHABLE = "unreachable"
AUTH_REFUSED = "auth refused"
TIMEOUT = "timeout"
COMMAND_FAILED = "command failed"
TRANSPORT_ERROR = "transport error"

#: ssh/pdsh/srun messages -> (stage, hint). First match wins, checked in order.
_TRANSPORT_MESSAGES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(
            r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|No \S+ host key is known"
        ),
        AUTH_REFUSED,
        "the node's host key is not in known_hosts: add it (ssh-keyscan NODE >> ~/.ssh/known_hosts) "
        "or, on a trusted network only, pass --insecure-no-host-key-check",
    ),
    (
        re.compile(r"Permission denied|Too many authentication failures|Authentication failed"),
        AUTH_REFUSED,
        "passwordless login is needed: check your key with `ssh -o BatchMode=yes NODE true`",
    ),
    (
        re.compile(
            r"Connection refused|Connection timed out|No route to host|Network is unreachable|"
            r"Could not resolve hostname|Name or service not known|Temporary failure in name resolution|"
            r"kex_exchange_identification|Connection reset|Connection closed by|port \d+: Operation timed out"
        ),
        UNREACHABLE,
        "check the node is up and sshd listens: `ssh NODE date`",
    ),
)


@dataclass
class NodeResult:
    node: str
    stage: str
    returncode: Optional[int]
    stdout: str
    stderr: str
    reason: str = ""
    hint: str = ""
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.stage == OK


class NodeTransport(Protocol):
    def node_argv(self, node: str, script: str) -> list[str]: ...

    def env(self) -> Optional[dict[str, str]]: ...


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


#: ssh -v lines that tell how far a login got; they and the rest of ssh's chatter are removed.
_SSH_CONNECTED = "Connection established."
_SSH_AUTHENTICATED = "Authenticated to "
_SSH_CHATTER = re.compile(r"^(?:\S+: )?(?:debug\d: |OpenSSH_|Transferred: sent |Bytes per second: )")


@dataclass
class LoginProgress:
    connected: bool = False
    authenticated: bool = False


def strip_ssh_debug(stderr: str) -> tuple[LoginProgress, str]:
    """Remove ``ssh -v`` lines; report whether TCP connected and whether login succeeded."""
    progress = LoginProgress()
    if "debug1: " not in stderr:
        return progress, stderr
    kept = []
    for line in stderr.splitlines():
        if _SSH_CHATTER.match(line):
            progress.connected = progress.connected or _SSH_CONNECTED in line
            progress.authenticated = progress.authenticated or _SSH_AUTHENTICATED in line
            continue
        kept.append(line)
    return progress, "\n".join(kept) + ("\n" if kept else "")


def split_markers(stderr: str) -> tuple[bool, Optional[int], str]:
    """Strip our marker lines: (did the remote start, its exit status if it finished, the rest of stderr)."""
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
    return started, status, (rest + "\n" if rest else "")


def _secs(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def started_node(stderr: str) -> str:
    """The node name a start marker carries (set in srun steps), or ''."""
    for line in stderr.splitlines():
        if START_MARKER in line:
            return line.split(START_MARKER, 1)[1].strip()
    return ""


def classify(
    node: str,
    returncode: Optional[int],
    stdout: str,
    stderr: str,
    timed_out: bool,
    deadline: float,
    elapsed: float,
) -> NodeResult:
    """Turn one node's raw outcome into a NodeResult with its stage."""
    login, stderr = strip_ssh_debug(stderr)
    started, status, rest = split_markers(stderr)
    result = NodeResult(node, OK, status, stdout, rest, elapsed=elapsed)
    if timed_out:
        result.stage = TIMEOUT if started else UNREACHABLE
        result.returncode = None
        within = _secs(deadline)
        if started:
            result.reason = f"command still running after {within}s"
            result.hint = "the node answered but the command hangs: raise --node-timeout or look at the node"
        elif login.authenticated:
            result.stage = TIMEOUT
            result.reason = f"logged in, but the command had not started after {within}s"
            result.hint = "slow shell start-up or --remote-setup on the node? try `ssh NODE true`"
        elif login.connected:
            result.stage = TIMEOUT
            result.reason = f"connected, but the login had not finished after {within}s"
            result.hint = (
                "sshd on the node is slow or overloaded (or DNS/LDAP lookups hang): raise --node-timeout"
            )
        else:
            result.reason = f"never answered within {within}s"
            result.hint = "the node or a firewall drops traffic: check it is up (`ping`, `ssh NODE date`)"
        return result
    if status is None:
        # The command never reported its exit status: the transport failed on the way.
        message = _last_line(rest) or f"exited with code {returncode} before running the command"
        for pattern, stage, hint in _TRANSPORT_MESSAGES:
            if pattern.search(rest):
                result.stage, result.hint = stage, hint
                break
        else:
            result.stage = TRANSPORT_ERROR if not started else COMMAND_FAILED
            result.hint = "run the transport by hand to see why: `ssh NODE date`"
        result.reason = _clean_reason(message, node)
        return result
    if status != 0:
        result.stage = COMMAND_FAILED
        result.reason = f"exit {status}" + (
            f": {_clean_reason(_last_line(rest), node)}" if rest.strip() else ""
        )
    return result


def _clean_reason(message: str, node: str) -> str:
    # pdsh prefixes lines with "node: " and "pdsh@host: node: "; the node is already shown.
    message = re.sub(r"^pdsh@\S+:\s*", "", message)
    if message.startswith(f"{node}: "):
        message = message[len(node) + 2 :]
    return message


def _kill_group(process: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _run_one(
    argv: list[str], env: Optional[dict[str, str]], node: str, timeout: float, stop_all: threading.Event
) -> NodeResult:
    if timeout <= 0 or stop_all.is_set():
        return NodeResult(
            node, TIMEOUT, None, "", "", "not started: overall deadline reached", "raise --timeout"
        )
    began = time.monotonic()
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,  # a whole ssh/pdsh tree is killed at the deadline
        )
    except OSError as exc:
        return NodeResult(node, TRANSPORT_ERROR, None, "", "", f"cannot start {argv[0]}: {exc}", "")
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        # SIGTERM first: srun then ends its step on the nodes, ssh closes its session.
        _kill_group(process, signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            stdout, stderr = process.communicate()
        timed_out = True
    finally:
        _kill_group(process)
    return classify(node, process.returncode, stdout, stderr, timed_out, timeout, time.monotonic() - began)


def run_on_nodes(
    transport: NodeTransport,
    nodes: Sequence[str],
    script: str,
    fanout: int = 32,
    node_timeout: float = 30.0,
    overall_timeout: Optional[float] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> list[NodeResult]:
    """Run ``script`` on every node through a per-node transport (ssh, pdsh); results in node order.

    At most ``fanout`` nodes at once. A node gets ``node_timeout`` seconds, less if the
    ``overall_timeout`` is closer; nodes not started by then are reported, not waited for.
    """
    overall_end = time.monotonic() + (overall_timeout if overall_timeout is not None else float("inf"))
    stop_all = threading.Event()
    env = transport.env()
    done = [0]
    lock = threading.Lock()

    def one(node: str) -> NodeResult:
        remaining = min(node_timeout, overall_end - time.monotonic())
        result = _run_one(transport.node_argv(node, script), env, node, remaining, stop_all)
        if progress is not None:
            with lock:
                done[0] += 1
                progress(done[0], len(nodes))
        return result

    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(nodes)))) as pool:
        try:
            return list(pool.map(one, nodes))
        finally:
            stop_all.set()


_SRUN_REFUSED = (
    (
        "overlap",
        re.compile(r"unrecognized option '--overlap'|unrecognized option.*overlap|invalid option.*overlap"),
    ),
    (
        "gres",
        re.compile(r"Invalid generic resource|Invalid gres|gres.*(?:invalid|not available)", re.IGNORECASE),
    ),
)


def run_srun_step(
    step: SrunStep,
    nodes: Sequence[str],
    script: str,
    timeout: float = 30.0,
    env: Optional[dict[str, str]] = None,
) -> list[NodeResult]:
    """Run ``script`` once per node in one srun step of a running job; per-node output via ``%N`` files.

    SLURM versions that refuse ``--overlap`` or ``--gres=gpu:0`` get the step again without it.
    """
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rankscope-srun-") as scratch:
        while True:
            for stale in Path(scratch).iterdir():
                stale.unlink()
            remaining = max(1.0, timeout - (time.monotonic() - began))
            result = _run_one(step.argv(nodes, script, scratch), env, "srun", remaining, threading.Event())
            refused = next((opt for opt, pattern in _SRUN_REFUSED if pattern.search(result.stderr)), None)
            files = list(Path(scratch).glob("*.err"))  # the step ran: do not retry
            if refused and not files and getattr(step, "overlap" if refused == "overlap" else "gres_zero"):
                step = step.without(refused)
                continue
            break
        step_timed_out = result.stage in (TIMEOUT, UNREACHABLE) and result.returncode is None
        srun_message = _last_line(split_markers(result.stderr)[2]) or result.reason
        by_node: dict[str, tuple[str, str]] = {}
        for err_path in Path(scratch).glob("*.err"):
            stderr = err_path.read_text(errors="replace")
            name = started_node(stderr)
            if name:
                out_path = err_path.with_suffix(".out")
                by_node[name] = (out_path.read_text(errors="replace") if out_path.exists() else "", stderr)
        results = []
        for node in nodes:
            if node not in by_node:
                stage = TIMEOUT if step_timed_out else TRANSPORT_ERROR
                reason = (
                    f"never answered within {_secs(timeout)}s"
                    if step_timed_out
                    else f"srun did not run here: {srun_message}"
                )
                results.append(
                    NodeResult(
                        node, stage, None, "", "", reason, "check the job with `squeue -j JOBID` and `sinfo`"
                    )
                )
                continue
            stdout, stderr = by_node[node]
            node_result = classify(node, None, stdout, stderr, False, timeout, time.monotonic() - began)
            if step_timed_out and node_result.returncode is None:
                node_result = classify(node, None, stdout, stderr, True, timeout, time.monotonic() - began)
            results.append(node_result)
        return results
