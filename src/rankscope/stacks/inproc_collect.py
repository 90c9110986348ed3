"""Stacks without ptrace: ask each rank's in-process handler for its stacks and read its answer.

For every target: find its runtime directory from its own environment and uid
(:mod:`rankscope.inproc.runtime`), read the handler's description (``<base>.inproc``), check that
the process is the one described (its start time) and that its handler speaks this rankscope's
protocol, and write a ``stacks`` request into its FIFO. The handler's thread takes every thread's
stack under the GIL and answers with a reply file. No signal is sent (protocol 1 signalled, and the
dump made in the signal handler crashed processes that start and end threads). All targets are asked
first and read in one poll loop, so the cost is that of the slowest rank, not the sum. Every file is
opened without waiting (a FIFO planted in its place is refused, never waited on), the deadline holds
in every phase and a stop signal ends the wait at the next poll. Every failure is a
:class:`Failure` of its rank.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from rankscope import procfs
from rankscope.inproc import progress as progress_file
from rankscope.inproc import runtime
from rankscope.inproc.handler import VERSION
from rankscope.model import Failure, FailureKind, Frame, ProcessSnapshot, Stage
from rankscope.ranks import short_hostname
from rankscope.stacks.collect import DumpOutcome, Stop, Target, precheck
from rankscope.stacks.inproc_text import as_pyspy_json, parse_faulthandler
from rankscope.stacks.report import StepInfo

ENABLE_HINT = (
    "start the job with RANKSCOPE_INPROC=1 in its environment (no code change; rankscope installed in the "
    "job's Python), or call rankscope.inproc.enable() early in the script"
)
UPGRADE_HINT = (
    "install this rankscope in the job's environment and restart the job; until then py-spy (without "
    "--via-signal) takes its stacks"
)
POLL = 0.01
#: The most read of a reply, and of a stack dump's reply (faulthandler's limits, 100 threads of 100
#: frames, stay well below): a file another process grew without bound is not read.
REPLY_MAX = 1 << 20
STACKS_MAX = 16 << 20


@dataclass
class Handler:
    """A target's handler, from its description file."""

    directory: str
    #: The process's uid: every file read or written must be its own.
    uid: int
    base: str
    main_thread: Optional[int]
    handler_thread: Optional[int]
    #: The request kinds the handler answers (its description lists them).
    kinds: tuple[str, ...] = ()
    #: The in-process protocol of the job's rankscope (its description's ``version``).
    version: int = 1

    def path(self, kind: str) -> str:
        return os.path.join(self.directory, f"{self.base}.{kind}")


def locate(pid: int, host: Optional[str] = None) -> tuple[str, int, dict[str, str]]:
    """(runtime directory, uid, {kind: path}) of ``pid``'s rankscope files.

    OSError when its environment is unreadable; :class:`runtime.UnsafeDirectory` when the directory
    is not private to the process's user (a link, another owner, open to others).
    """
    environ = procfs.environ(pid)
    uid = procfs.uid(pid)
    if uid is None:
        raise ProcessLookupError(pid)
    directory = runtime.runtime_dir(environ, uid)
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return directory, uid, {}
    runtime.check_private(st, uid)
    return directory, uid, runtime.files_of(directory, pid, host)


def version_note(version: int) -> Optional[str]:
    """What to tell the user when the job's rankscope speaks another protocol (None when the same)."""
    if version > VERSION:
        return (
            f"a newer rankscope runs inside the job (in-process protocol {version}; this command line speaks "
            f"{VERSION}): install the same rankscope for the command line"
        )
    if version < VERSION:
        return (
            f"an older rankscope runs inside the job (in-process protocol {version}; this command line speaks "
            f"{VERSION}): its handler dumps stacks from a signal handler, which can crash a process that "
            "starts and ends threads, so it is not asked"
        )
    return None


def find_handler(
    target: Target, host: str, for_stacks: bool = True
) -> tuple[Optional[Handler], Optional[Failure]]:
    """The target's handler, or the failure that says why it has none (with the fix).

    ``for_stacks``: the handler must answer ``stacks`` requests (protocol 2 or later); other requests
    go to a handler of any protocol (it answers or says it does not know the kind).
    """
    try:
        directory, uid, files = locate(target.pid, host)
    except runtime.UnsafeDirectory as exc:
        return None, target.failure(
            Stage.ATTACH,
            f"its rankscope directory is not private to its user ({exc}): not used",
            "remove it; the job's next start creates it 0700",
            FailureKind.PERMISSION,
        )
    except PermissionError:
        return None, target.failure(
            Stage.ATTACH,
            "cannot read its environment to find its rankscope files (another user's process)",
            "run rankscope stacks as the job's user, or as root",
            FailureKind.PERMISSION,
        )
    except (OSError, ValueError):
        return None, target.failure(
            Stage.DISCOVER, "no such process (it exited)", "its log says why", FailureKind.GONE
        )
    where = files.get("inproc")
    if where is None:
        return None, target.failure(
            Stage.ATTACH,
            f"no in-process handler (no description of pid {target.pid} in {directory})",
            ENABLE_HINT,
            FailureKind.NO_HANDLER,
        )
    try:
        info: Any = json.loads(runtime.read_owned(where, uid, 1 << 16))
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
        handler = Handler(
            directory=directory,
            uid=uid,
            base=str(info["base"]),
            main_thread=info.get("main_thread"),
            handler_thread=info.get("handler_thread"),
            kinds=tuple(str(k) for k in info.get("kinds") or ()),
            version=int(info.get("version") or 1),
        )
        if "/" in handler.base or handler.base in ("", ".", ".."):
            raise ValueError(f"bad base name {handler.base!r}")
        ticks = int(info.get("start_ticks") or 0)
    except PermissionError as exc:
        return None, target.failure(
            Stage.ATTACH,
            f"cannot read {where}: {exc.strerror or exc}",
            "run rankscope stacks as the job's user, or as root",
            FailureKind.PERMISSION,
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, target.failure(
            Stage.ATTACH,
            f"unreadable handler description {where}: {exc}",
            "restart the job (the file is rewritten at start); " + ENABLE_HINT,
            FailureKind.BAD_OUTPUT,
        )
    if ticks and ticks != progress_file.start_ticks(target.pid):
        return None, target.failure(
            Stage.ATTACH,
            f"no in-process handler: {where} belongs to an earlier process with the same pid",
            ENABLE_HINT,
            FailureKind.NO_HANDLER,
        )
    if for_stacks and (handler.version < VERSION or "stacks" not in handler.kinds):
        return None, target.failure(
            Stage.ATTACH,
            version_note(min(handler.version, VERSION - 1)) or "",
            UPGRADE_HINT,
            FailureKind.NO_HANDLER,
        )
    return handler, None


@dataclass
class _Pending:
    outcome: DumpOutcome
    handler: Handler
    request_id: str
    ends: float


def _request(
    handler: Handler,
    kind: str,
    request_id: str,
    args: Optional[dict[str, Any]] = None,
    until: float = 0.0,
    stop: Optional[Stop] = None,
) -> bool:
    """Write one request line into the handler's FIFO; False when no thread reads it.

    A full FIFO (its thread busy with the requests of others) is tried again every poll until
    ``until`` (a time.monotonic() instant) or a stop signal.
    """
    line = json.dumps({"v": VERSION, "id": request_id, "kind": kind, "args": args or {}}).encode() + b"\n"
    try:
        fd = runtime.open_owned(handler.path("req"), os.O_WRONLY, handler.uid, fifo=True)
    except OSError:
        return False
    try:
        while True:
            try:
                return os.write(fd, line) == len(line)
            except BlockingIOError:
                if time.monotonic() >= until or (stop is not None and stop.signum):
                    return False
                time.sleep(POLL)
            except OSError:
                return False
    finally:
        os.close(fd)


def _read_reply(handler: Handler, request_id: str, limit: int) -> Optional[dict[str, Any]]:
    """The reply to a request, removed once read; None while there is none. A reply that cannot be
    read (refused, too large, not JSON) is an answer too: ``{"ok": false, "error": why}``."""
    path = handler.path(f"{request_id}.reply")
    try:
        reply: Any = json.loads(runtime.read_owned(path, handler.uid, limit))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        reply = {"ok": False, "error": f"unreadable reply: {exc}"}
    with contextlib.suppress(OSError):
        os.unlink(path)
    return reply if isinstance(reply, dict) else {"ok": False, "error": "the reply is not a JSON object"}


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
    if not _request(handler, "stacks", request_id, until=ends, stop=stop):
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
            reply = _read_reply(item.handler, item.request_id, STACKS_MAX)
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


@dataclass
class Answer:
    """One target's answer to a request: its handler and result, or why there is none."""

    target: Target
    handler: Optional[Handler] = None
    request_id: str = ""
    result: Any = None
    #: Why there is no result ("" when there is one).
    problem: str = ""
    #: The target runs no usable handler at all (rather than one that failed to answer).
    no_handler: bool = False


def request_all(
    targets: Sequence[Target],
    kind: str,
    deadline: float,
    host: Optional[str] = None,
    stop: Optional[Stop] = None,
) -> list[Answer]:
    """Ask every target's handler for ``kind`` at once and wait for the answers until ``deadline``
    (a time.monotonic() instant). The request's arguments are ``{"id": <its id>}``. No signal is sent:
    only the handler's request thread is involved."""
    host = host or short_hostname()
    answers = [Answer(t) for t in targets]
    waiting: list[Answer] = []
    for answer in answers:
        handler, failure = find_handler(answer.target, host, for_stacks=False)
        if handler is None:
            answer.problem = failure.reason if failure is not None else "no in-process handler"
            answer.no_handler = True
            continue
        answer.handler = handler
        if kind not in handler.kinds:
            answer.problem = f"its handler does not answer {kind!r} requests (an older rankscope in the job)"
            continue
        answer.request_id = secrets.token_hex(8)
        if not _request(handler, kind, answer.request_id, {"id": answer.request_id}, deadline, stop):
            answer.problem = "its handler's request thread does not read its requests"
            continue
        waiting.append(answer)
    while waiting:
        for answer in list(waiting):
            assert answer.handler is not None
            reply = _read_reply(answer.handler, answer.request_id, REPLY_MAX)
            if reply is None:
                continue
            if reply.get("ok"):
                answer.result = reply.get("result")
            else:
                answer.problem = f"its handler answered with an error: {reply.get('error') or 'no answer'}"
            waiting.remove(answer)
        if not waiting or time.monotonic() >= deadline or (stop is not None and stop.signum):
            break
        time.sleep(POLL)
    for answer in waiting:
        answer.problem = (
            "no answer from its handler before the deadline (its request thread is busy or stopped)"
        )
    return answers


def read_steps(targets: Sequence[Target], host: Optional[str] = None) -> dict[int, StepInfo]:
    """Each target's progress marker, when it records one (no marker, or an unreadable one: absent)."""
    host = host or short_hostname()
    now = time.time()
    steps: dict[int, StepInfo] = {}
    listed: dict[str, list[str]] = {}
    for target in targets:
        try:
            environ = procfs.environ(target.pid)
            uid = procfs.uid(target.pid)
        except (OSError, ValueError):
            continue
        if uid is None:
            continue
        directory = runtime.runtime_dir(environ, uid)
        if directory not in listed:
            try:
                runtime.check_private(os.lstat(directory), uid)  # not a link, the job user's own
                listed[directory] = os.listdir(directory)
            except OSError:
                listed[directory] = []
        name = next(
            (
                n
                for n in listed[directory]
                if (parsed := runtime.parse_name(n)) is not None
                and parsed[2] == target.pid
                and parsed[0] == host
                and parsed[3] == "progress"
            ),
            None,
        )
        if name is None:
            continue
        try:
            record = progress_file.read(os.path.join(directory, name), uid=uid)
        except (OSError, ValueError):
            continue
        if record.pid != target.pid or record.start_ticks != progress_file.start_ticks(target.pid):
            continue  # a file of an earlier process with the same pid
        if record.calls == 0:
            continue
        steps[target.pid] = StepInfo(
            step=record.step, labels=dict(record.labels), age=max(0.0, now - record.updated)
        )
    return steps
