"""Run one remote script on many nodes at once, with deadlines, and turn each outcome into data.

One thread runs everything: at most ``fanout`` transports (ssh, pdsh, or one srun step) at a
time, their stdout and stderr read through one selector, each process watched through a pidfd.
A node is done when its transport exits, not when its pipes close: a daemonised grandchild (an
ssh ControlPersist master) may hold them open for minutes. Every transport is a
:class:`rankscope.lifetime.Child` (:func:`rankscope.lifetime.start`, the one rule for what
rankscope starts): a session and process group of its own, its token in its environment, the
guardian ending it if rankscope dies, reaped exactly once (its group SIGKILLed before the pid is
released); each pipe is kept up to :data:`OUTPUT_LIMIT` bytes (:class:`rankscope.lifetime.Capture`).
At its deadline the group gets SIGTERM (srun then ends its step, ssh its session) and SIGKILL a
second later; whatever the group left behind is killed when the node is done, and so is what it
left outside its group (pdsh's ssh clients run in sessions of their own: they carry the
transport's token, and every carrier of it is ended). ssh and pdsh get a stdin that stays
open and silent while the node runs: the remote watcher of
:func:`rankscope.cluster.transports.remote_script` ends the remote command when it closes.
SIGINT or SIGTERM to rankscope (a :class:`rankscope.lifetime.StopSignals` passed as ``stop``)
wakes the loop through a pipe in the selector: every running node is ended the same way and
reported ``interrupted``, nodes not started yet likewise. Every outcome goes through the pure
:func:`rankscope.cluster.classify.classify`; nothing here raises for a node: one bad node never
hides the others.

ClusterShell's ``Task`` was measured as the engine for this and not taken: docs/multinode.md,
"Why not ClusterShell's Task".
"""

from __future__ import annotations

import os
import re
import resource
import selectors
import signal
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Optional, Protocol

from rankscope import guardian
from rankscope.cluster.classify import NodeResult, classify, last_line, split_markers, started_node
from rankscope.cluster.transports import SrunStep
from rankscope.folding import duration
from rankscope.lifetime import OUTPUT_LIMIT, TERM_GRACE, Capture, Child, StopSignals, signal_group, start
from rankscope.model import Stage

#: After SIGINT/SIGTERM to rankscope, how long a transport gets to end cleanly before SIGKILL
#: (Ctrl-C ends a run within about a second); a second signal kills at once.
STOP_GRACE = 0.5
#: Without pidfds (Linux < 5.3, or a low open-files limit), how often exits are looked for.
_POLL_EXIT = 0.05
#: At most this many 64 KiB reads from a finished node's pipes (a grandchild may still write).
_DRAIN_READS = 64

Progress = Optional[Callable[[str], None]]


class NodeTransport(Protocol):
    def node_argv(self, node: str, script: str) -> list[str]: ...

    def env(self) -> Optional[dict[str, str]]: ...


class _Running:
    """One transport process: its pipes, its deadline, what it printed so far."""

    def __init__(self, index: int, node: str, child: Child, budget: float) -> None:
        process = child.process
        assert process.stdout is not None and process.stderr is not None
        self.index = index
        self.node = node
        self.child = child
        self.budget = budget
        self.began = child.started
        self.deadline = self.began + budget
        self.kill_at = float("inf")
        self.timed_out = False
        #: The signal (SIGINT, SIGTERM) that made rankscope end this node; 0: none.
        self.interrupted = 0
        self.stdout, self.stderr = Capture(OUTPUT_LIMIT), Capture(OUTPUT_LIMIT)
        self.pipes = {process.stdout.fileno(): process.stdout, process.stderr.fileno(): process.stderr}
        self.captures = {process.stdout.fileno(): self.stdout, process.stderr.fileno(): self.stderr}
        self.pidfd: Optional[int] = None

    @property
    def ending(self) -> bool:
        return self.timed_out or bool(self.interrupted)

    @property
    def wake_at(self) -> float:
        return self.kill_at if self.ending else self.deadline

    def signal_group(self, sig: int) -> None:
        signal_group(self.child.pid, sig)

    def end(self, now: float, grace: float) -> None:
        """SIGTERM to the group now, SIGKILL after ``grace`` (sooner if already due)."""
        if not self.ending:
            self.signal_group(signal.SIGTERM)
        self.kill_at = min(self.kill_at, now + grace)


class _Fanout:
    """Start transports, read them, end them at their deadline; one selector for all of them."""

    def __init__(
        self,
        env: Optional[dict[str, str]],
        fanout: int,
        hold_stdin: bool = True,
        stop: Optional[StopSignals] = None,
    ) -> None:
        self.env = env
        self.hold_stdin = hold_stdin
        self.selector = selectors.DefaultSelector()
        self.running: list[_Running] = []
        self.stop = stop
        self.stopped = 0
        if stop is not None and stop.fd >= 0:
            self.selector.register(stop.fd, selectors.EVENT_READ, None)
        # A pidfd is a third descriptor per node: only where the open-files limit has room for it.
        room = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.use_pidfd = hasattr(os, "pidfd_open") and (room < 0 or 3 * fanout + 64 <= room)

    def start(self, index: int, node: str, argv: list[str], budget: float) -> Optional[NodeResult]:
        """Start one transport; a NodeResult at once if it cannot start."""
        # stdin: a pipe rankscope holds open and never writes (the remote watcher's end of file
        # when it closes), or /dev/null; never the user's terminal (a session of its own).
        stdin = subprocess.PIPE if self.hold_stdin else subprocess.DEVNULL
        try:
            child = start(
                argv,
                budget,
                env=self.env,
                capture=None,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            return NodeResult(node, Stage.TRANSPORT_ERROR, None, "", "", f"cannot start {argv[0]}: {exc}")
        run = _Running(index, node, child, budget)
        for fd in run.pipes:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, run)
        if self.use_pidfd:
            try:
                run.pidfd = os.pidfd_open(child.pid)
                self.selector.register(run.pidfd, selectors.EVENT_READ, run)
            except OSError:  # a kernel without pidfds: look for exits every _POLL_EXIT seconds
                self.use_pidfd = False
        self.running.append(run)
        return None

    def _read(self, run: _Running, fd: int) -> bool:
        """Take what one pipe holds now; False when nothing more is there (closed at end of file)."""
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        if not chunk:
            self._close(run, fd)
            return False
        run.captures[fd].add(chunk)
        return True

    def _close(self, run: _Running, fd: int) -> None:
        self.selector.unregister(fd)
        run.pipes.pop(fd).close()

    def wait(self) -> list[tuple[int, NodeResult]]:
        """Read output until a transport exits or a deadline passes; the nodes that ended, classified."""
        now = time.monotonic()
        wait = max(0.0, min(run.wake_at for run in self.running) - now)
        if not self.use_pidfd:
            wait = min(wait, _POLL_EXIT)
        # Infinite: every node is past SIGKILL, only their exits (pidfds) are awaited.
        for key, _ in self.selector.select(None if wait == float("inf") else wait):
            run: Optional[_Running] = key.data
            if run is None:  # SIGINT or SIGTERM to rankscope
                self.interrupt()
            elif key.fd in run.pipes:
                self._read(run, key.fd)
        now = time.monotonic()
        ended = []
        for run in list(self.running):
            if run.child.exited():  # not reaped yet: its pid and group stay reserved until _finish
                ended.append((run.index, self._finish(run)))
            elif not run.ending and now >= run.deadline:
                # SIGTERM first: srun then ends its step on the nodes, ssh closes its session.
                run.end(now, TERM_GRACE)
                run.timed_out = True
            elif run.ending and now >= run.kill_at:
                run.kill_at = float("inf")
                run.signal_group(signal.SIGKILL)
        return ended

    def interrupt(self) -> None:
        """A signal came: end every running node (a second signal: SIGKILL at once)."""
        assert self.stop is not None and self.stop.signum is not None
        self.stop.drain()
        self.stopped = self.stop.signum
        now = time.monotonic()
        grace = STOP_GRACE if self.stop.count < 2 else 0.0
        for run in self.running:
            run.end(now, grace)
            run.interrupted = run.interrupted or self.stopped

    def _finish(self, run: _Running) -> NodeResult:
        """The transport exited: end its group and reap it, take what its pipes hold now, classify it."""
        self.running.remove(run)
        child = run.child
        returncode = child.reap()  # anything it left behind in its group is SIGKILLed first
        if child.process.stdin is not None:
            child.process.stdin.close()  # the remote watcher's end of file, if ssh still runs
        if run.ending:
            # ... and outside it (pdsh's ssh clients in sessions of their own), by its token.
            # A transport that ends by itself has ended its own children: no /proc pass for it.
            guardian.end_carriers(child.token, 0.0)
        for fd in list(run.pipes):
            for _ in range(_DRAIN_READS):
                if not self._read(run, fd):
                    break
            if fd in run.pipes:  # still open: a grandchild outside the group holds it
                self._close(run, fd)
        if run.pidfd is not None:
            self.selector.unregister(run.pidfd)
            os.close(run.pidfd)
        elapsed = time.monotonic() - run.began
        stdout, stderr = run.stdout.text(), run.stderr.text()
        result = classify(run.node, returncode, stdout, stderr, run.timed_out, run.budget, elapsed)
        if run.interrupted and result.returncode is None:  # no exit status came back from the node
            name = signal.Signals(run.interrupted).name
            reason = f"interrupted by {name} before it answered"
            result = replace(result, stage=Stage.INTERRUPTED, reason=reason, hint="")
        return result

    def close(self) -> None:
        """End whatever still runs (an exception in the caller): nothing outlives the fan-out."""
        for run in list(self.running):
            run.child.end(0.0)  # its group and every carrier of its token, SIGKILLed and reaped
            self._finish(run)
        self.selector.close()


def run_commands(
    commands: Sequence[tuple[str, list[str]]],
    env: Optional[dict[str, str]] = None,
    fanout: int = 32,
    node_timeout: float = 30.0,
    overall_timeout: Optional[float] = None,
    progress: Progress = None,
    stop: Optional[StopSignals] = None,
    hold_stdin: bool = True,
    on_result: Optional[Callable[[NodeResult], NodeResult]] = None,
) -> list[NodeResult]:
    """Run ``(node, argv)`` commands, at most ``fanout`` at once; one NodeResult each, in order.
    ``on_result``: each node's result goes through it as the node ends (its reading, while the others run).

    A command gets ``node_timeout`` seconds, less if ``overall_timeout`` (from now) is closer;
    commands not started by then are reported, not run. After a signal recorded by ``stop``
    every running command is ended and nothing more is started: those nodes are
    ``interrupted``, and the caller reports what the others gave. ``hold_stdin``: each command
    gets a stdin that stays open while it runs (see :mod:`rankscope.lifetime`).
    """
    overall_end = time.monotonic() + (overall_timeout if overall_timeout is not None else float("inf"))
    pending = deque(enumerate(commands))
    results: dict[int, NodeResult] = {}
    engine = _Fanout(env, fanout, hold_stdin, stop)

    def record(index: int, result: NodeResult) -> None:
        results[index] = on_result(result) if on_result is not None else result
        if progress is not None:
            progress(f"{len(results)}/{len(commands)} nodes")

    try:
        while pending or engine.running:
            while pending and len(engine.running) < max(1, fanout):
                index, (node, argv) = pending.popleft()
                budget = min(node_timeout, overall_end - time.monotonic())
                if stop is not None and stop.signum is not None:
                    reason = f"not started: interrupted by {stop.name}"
                    record(index, NodeResult(node, Stage.INTERRUPTED, None, "", "", reason))
                    continue
                if budget <= 0:
                    reason = "not started: overall deadline reached"
                    record(index, NodeResult(node, Stage.TIMEOUT, None, "", "", reason, "raise --deadline"))
                    continue
                failed = engine.start(index, node, argv, budget)
                if failed is not None:
                    record(index, failed)
            if engine.running:
                for index, result in engine.wait():
                    record(index, result)
    finally:
        engine.close()
    return [results[index] for index in range(len(commands))]


def run_on_nodes(
    transport: NodeTransport,
    nodes: Sequence[str],
    script: str,
    fanout: int = 32,
    node_timeout: float = 30.0,
    overall_timeout: Optional[float] = None,
    progress: Progress = None,
    stop: Optional[StopSignals] = None,
    on_result: Optional[Callable[[NodeResult], NodeResult]] = None,
) -> list[NodeResult]:
    """Run ``script`` on every node through a per-node transport (ssh, pdsh); results in node order.

    At most ``fanout`` nodes at once. A node gets ``node_timeout`` seconds, less if the
    ``overall_timeout`` is closer; nodes not started by then are reported, not waited for.
    ``progress`` gets ``"12/40 nodes"`` as nodes end; ``on_result`` each node's result then.
    """
    commands = [(node, transport.node_argv(node, script)) for node in nodes]
    return run_commands(
        commands, transport.env(), fanout, node_timeout, overall_timeout, progress, stop, on_result=on_result
    )


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
    stop: Optional[StopSignals] = None,
) -> list[NodeResult]:
    """Run ``script`` once per node in one srun step of a running job; per-node output via ``%t`` files.

    SLURM versions that refuse ``--overlap`` or ``--gres=gpu:0`` get the step again without it.
    """
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rankscope-srun-") as scratch:
        while True:
            for stale in Path(scratch).iterdir():
                stale.unlink()
            remaining = max(1.0, timeout - (time.monotonic() - began))
            argv = step.argv(nodes, script, scratch)
            [result] = run_commands([("srun", argv)], env, 1, remaining, stop=stop, hold_stdin=False)
            refused = next((opt for opt, pattern in _SRUN_REFUSED if pattern.search(result.stderr)), None)
            files = list(Path(scratch).glob("*.err"))  # the step ran: do not retry
            if refused and not files and getattr(step, "overlap" if refused == "overlap" else "gres_zero"):
                step = step.without(refused)
                continue
            break
        step_timed_out = result.stage in (Stage.TIMEOUT, Stage.UNREACHABLE) and result.returncode is None
        srun_message = last_line(split_markers(result.stderr).rest) or result.reason
        by_node: dict[str, tuple[str, str]] = {}
        for err_path in Path(scratch).glob("*.err"):
            stderr = err_path.read_text(errors="replace")
            name = started_node(stderr)
            if name:
                out_path = err_path.with_suffix(".out")
                by_node[name] = (out_path.read_text(errors="replace") if out_path.exists() else "", stderr)
        elapsed = time.monotonic() - began
        results = []
        for node in nodes:
            if node not in by_node:
                stage = Stage.TIMEOUT if step_timed_out else Stage.TRANSPORT_ERROR
                reason = (
                    f"never answered within {duration(timeout)}s"
                    if step_timed_out
                    else f"srun did not run here: {srun_message}"
                )
                hint = "check the job with `squeue -j JOBID` and `sinfo`"
                results.append(NodeResult(node, stage, None, "", "", reason, hint, elapsed))
                continue
            stdout, stderr = by_node[node]
            node_result = classify(node, None, stdout, stderr, False, timeout, elapsed)
            if step_timed_out and node_result.returncode is None:
                node_result = classify(node, None, stdout, stderr, True, timeout, elapsed)
            results.append(node_result)
        if result.stage is Stage.INTERRUPTED:  # the step was ended: what did not answer was interrupted
            results = [
                r
                if r.returncode is not None
                else replace(r, stage=result.stage, reason=result.reason, hint="")
                for r in results
            ]
        return results
