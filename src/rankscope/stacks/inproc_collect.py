"""Stacks without ptrace: ask each rank's in-process handler for its stacks and read its answer.

For every target: find its handler and check that it speaks this rankscope's protocol, and write a
``stacks`` request into its FIFO (:mod:`rankscope.stacks.inproc_request`). The handler's thread takes every thread's
stack under the GIL and answers with a reply file. No signal is sent (protocol 1 signalled, and the
dump made in the signal handler crashed processes that start and end threads). All targets are asked
first and read in one poll loop, so the cost is that of the slowest rank, not the sum. Every file is
opened without waiting (a FIFO planted in its place is refused, never waited on), the deadline holds
in every phase and a stop signal ends the wait at the next poll. Every failure is a
:class:`Failure` of its rank.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from rankscope import procfs
from rankscope.model import Failure, FailureKind, Frame, ProcessSnapshot, Stage
from rankscope.ranks import short_hostname
from rankscope.stacks.collect import DumpOutcome, Stop, Target, precheck
from rankscope.stacks.inproc_request import POLL, Handler, find_handler, read_reply, send_request
from rankscope.stacks.inproc_text import as_pyspy_json, parse_faulthandler

#: The most read of a reply, of a stack dump's reply (faulthandler's limits, 100 threads of 100
#: frames, stay well below): a file another process grew without bound is not read.
STACKS_MAX = 16 << 20


@dataclass
class _Pending:
    outcome: DumpOutcome
    handler: Handler
    request_id: str
    ends: float


def _start(
    target: Target, host: str, timeout: float, deadline: Optional[float], stop: Optional[Stop]
) -> DumpOutcome | _Pending:
    outcome = DumpOutcome(target=target)
    failure, outcome.state_before = precheck(target)
    if failure is None:
        handler, failure = find_handler(target, host)
    if failure is not None:
        outcome.failure = failure
        return outcome
    assert handler is not None
    now = time.monotonic()
    ends = now + timeout if deadline is None else min(now + timeout, deadline)
    request_id = secrets.token_hex(8)
    if not send_request(handler, "stacks", request_id, until=ends, stop=stop):
        outcome.failure = target.failure(
            Stage.DUMP,
            f"its in-process handler does not read its requests ({handler.path('req')})",
            "its handler thread is gone, or its request queue stayed full until the deadline: py-spy "
            "(without --via-signal) takes its stacks",
            FailureKind.NO_HANDLER,
        )
        return outcome
    return _Pending(outcome, handler, request_id, ends)


def _names(result: Any) -> dict[int, tuple[str, Optional[int]]]:
    names: dict[int, tuple[str, Optional[int]]] = {}
    if not isinstance(result, dict):
        return names
    for ident, value in result.items():
        with contextlib.suppress(ValueError, TypeError, IndexError):
            native = value[1]
            names[int(ident)] = (str(value[0]), int(native) if native is not None else None)
    return names


def _failed(pending: _Pending, failure: Failure) -> DumpOutcome:
    pending.outcome.failure = failure
    return pending.outcome


def _finish(pending: _Pending, reply: dict[str, Any], intern: dict[Frame, Frame]) -> DumpOutcome:
    outcome, handler = pending.outcome, pending.handler
    target = outcome.target
    result = reply.get("result") if reply.get("ok") else None
    text = result.get("text") if isinstance(result, dict) else None
    if not isinstance(text, str):
        return _failed(
            pending,
            target.failure(
                Stage.DUMP,
                f"its in-process handler answered without stacks: {reply.get('error') or 'no text'}",
                "rerun; py-spy (without --via-signal) takes its stacks",
                FailureKind.BAD_OUTPUT,
            ),
        )
    assert isinstance(result, dict)
    current = result.get("current")
    try:
        threads = parse_faulthandler(
            text,
            target.pid,
            main_ident=handler.main_thread,
            names=_names(result.get("threads")),
            skip=current if isinstance(current, int) else handler.handler_thread,
            intern=intern,
        )
    except ValueError as exc:
        return _failed(
            pending,
            target.failure(
                Stage.PARSE,
                f"unreadable stacks from its in-process handler: {exc}",
                "rerun",
                FailureKind.BAD_OUTPUT,
            ),
        )
    outcome.snapshot = ProcessSnapshot(
        pid=target.pid, rank=target.rank, threads=threads, cmdline=target.cmdline
    )
    outcome.raw = as_pyspy_json(threads)
    outcome.handler_version = handler.version
    return outcome


def _interrupted(item: _Pending, stop: Stop) -> DumpOutcome:
    return _failed(
        item,
        item.outcome.target.failure(
            Stage.INTERRUPTED, f"not dumped: {stop.name} stopped the run", "run again", FailureKind.OTHER
        ),
    )


def _timed_out(item: _Pending, started: float) -> DumpOutcome:
    target = item.outcome.target
    state = procfs.process(target.pid)
    letter = state.state if state is not None else "gone"
    return _failed(
        item,
        target.failure(
            Stage.DUMP,
            f"no answer from its in-process handler within {item.ends - started:.1f}s (process state {letter})",
            "its handler thread needs the GIL: a thread that holds it and never releases it, a stopped "
            "process (T) or one in the kernel (D) keeps it from answering; py-spy (without --via-signal) "
            "dumps such a process, or raise --timeout",
            FailureKind.TIMED_OUT,
        ),
    )


def collect_via_signal(
    targets: Sequence[Target],
    timeout: float,
    deadline: Optional[float] = None,
    progress: Optional[Callable[[int, int], None]] = None,
    stop: Optional[Stop] = None,
    host: Optional[str] = None,
) -> list[DumpOutcome]:
    """Dump every target through its in-process handler; outcomes in the targets' order.

    (The name is kept from protocol 1, when a signal asked for the dump; no signal is sent now.)
    """
    host = host or short_hostname()
    intern: dict[Frame, Frame] = {}
    started = time.monotonic()
    results: dict[int, DumpOutcome] = {}
    pending: list[_Pending] = []
    for index, target in enumerate(targets):
        if stop is not None and stop.signum:
            outcome = DumpOutcome(target=target)
            outcome.failure = target.failure(
                Stage.INTERRUPTED, f"not dumped: {stop.name} stopped the run", "run again", FailureKind.OTHER
            )
            results[index] = outcome
            continue
        begun = _start(target, host, timeout, deadline, stop)
        if isinstance(begun, _Pending):
            begun.outcome.seconds = 0.0
            pending.append(begun)
            results[index] = begun.outcome
        else:
            results[index] = begun
    total, done = len(targets), len(targets) - len(pending)
    if progress is not None and done:
        progress(done, total)
    while pending:
        if stop is not None and stop.signum:
            for item in pending:
                _interrupted(item, stop)
            break
        time.sleep(POLL)
        now = time.monotonic()
        for item in list(pending):
            finished: Optional[DumpOutcome] = None
            reply = read_reply(item.handler, item.request_id, STACKS_MAX)
            if reply is not None:
                finished = _finish(item, reply, intern)
            elif now >= item.ends:
                finished = _timed_out(item, started)
            if finished is not None:
                finished.seconds = now - started
                pending.remove(item)
                done += 1
                if progress is not None:
                    progress(done, total)
    return [results[i] for i in range(len(targets))]
