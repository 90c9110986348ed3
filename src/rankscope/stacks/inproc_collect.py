"""Stacks without ptrace: signal each rank's in-process handler and read what it wrote.

For every target: find its runtime directory from its own environment and uid
(:mod:`rankscope.inproc.runtime`), read the handler's description (``<base>.inproc``), check that
the process is the one described (its start time) and that it still catches the signal
(``SigCgt`` in /proc/PID/status: an uncaught real-time signal would end it), lock and empty its
``.stacks`` file, ask its request thread for the names of its threads, send the signal, and read
the dump once its size settles. All targets are signalled first and read in one poll loop, so the
cost is that of the slowest rank, not the sum. Every failure is a :class:`Failure` of its rank.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from rankscope import procfs
from rankscope.inproc import progress as progress_file
from rankscope.inproc import runtime
from rankscope.model import Failure, FailureKind, Frame, ProcessSnapshot, Stage
from rankscope.ranks import short_hostname
from rankscope.stacks.collect import DumpOutcome, Stop, Target, precheck
from rankscope.stacks.inproc_text import as_pyspy_json, parse_faulthandler
from rankscope.stacks.report import StepInfo

ENABLE_HINT = (
    "start the job with RANKSCOPE_INPROC=1 in its environment (no code change; rankscope installed in the "
    "job's Python), or call rankscope.inproc.enable() early in the script"
)
#: A dump is complete when its size has not changed for this long (faulthandler writes it at once, in
#: one signal handler; only a preemption of the rank between two of its writes pauses it).
SETTLE = 0.05
#: After the dump, how long to wait for the names of the threads (the request thread needs the GIL).
NAMES_WAIT = 0.5
POLL = 0.01
#: The most read of a reply and of a dump (faulthandler's own limits, 100 threads of 100 frames, stay
#: well below): a file another process grew without bound is not read whole.
REPLY_MAX = 1 << 20
STACKS_MAX = 16 << 20


@dataclass
class Handler:
    """A target's handler, from its description file."""

    directory: str
    #: The process's uid: every file read or written must be its own.
    uid: int
    base: str
    signum: int
    signal_name: str
    main_thread: Optional[int]
    handler_thread: Optional[int]
    #: The request kinds the handler answers (its description lists them).
    kinds: tuple[str, ...] = ()

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


def caught_signals(pid: int) -> int:
    value = procfs.status_field(pid, "SigCgt")
    return int(value, 16) if value else 0


def find_handler(target: Target, host: str) -> tuple[Optional[Handler], Optional[Failure]]:
    """The target's handler, or the failure that says why it has none (with the fix)."""
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
            signum=int(info["signal"]),
            signal_name=str(info.get("signal_name") or info["signal"]),
            main_thread=info.get("main_thread"),
            handler_thread=info.get("handler_thread"),
            kinds=tuple(str(k) for k in info.get("kinds") or ()),
        )
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
    if not caught_signals(target.pid) & (1 << (handler.signum - 1)):
        return None, target.failure(
            Stage.ATTACH,
            f"its in-process handler is gone: it no longer catches {handler.signal_name}"
            " (the script may have replaced the signal's handler)",
            "rankscope did not signal it; " + ENABLE_HINT,
            FailureKind.NO_HANDLER,
        )
    return handler, None


@dataclass
class _Pending:
    outcome: DumpOutcome
    handler: Handler
    stacks_fd: int
    request_id: str
    ends: float
    size: int = -1
    size_since: float = 0.0
    text: str = ""
    names: Optional[dict[int, tuple[str, Optional[int]]]] = None
    names_until: float = 0.0
    done_at: float = field(default=0.0)
    #: The dump had fewer threads than the process named: it was read once more after another settle.
    recounted: bool = False


def _request(handler: Handler, kind: str, request_id: str, args: Optional[dict[str, Any]] = None) -> bool:
    """Write one request line into the handler's FIFO; False when no thread reads it."""
    line = json.dumps({"v": 1, "id": request_id, "kind": kind, "args": args or {}}).encode() + b"\n"
    try:
        fd = runtime.open_owned(handler.path("req"), os.O_WRONLY, handler.uid, fifo=True)
    except OSError:
        return False
    try:
        return os.write(fd, line) == len(line)
    except OSError:
        return False
    finally:
        os.close(fd)


def _read_names(pending: _Pending) -> Optional[dict[int, tuple[str, Optional[int]]]]:
    path = pending.handler.path(f"{pending.request_id}.reply")
    try:
        reply = json.loads(runtime.read_owned(path, pending.handler.uid, REPLY_MAX))
    except (OSError, ValueError):
        return None
    with contextlib.suppress(OSError):
        os.unlink(path)
    result = reply.get("result") if isinstance(reply, dict) and reply.get("ok") else None
    if not isinstance(result, dict):
        return {}
    names: dict[int, tuple[str, Optional[int]]] = {}
    for ident, value in result.items():
        with contextlib.suppress(ValueError, TypeError, IndexError):
            native = value[1]
            names[int(ident)] = (str(value[0]), int(native) if native is not None else None)
    return names


def _start(target: Target, host: str, timeout: float, deadline: Optional[float]) -> DumpOutcome | _Pending:
    outcome = DumpOutcome(target=target)
    failure, outcome.state_before = precheck(target)
    if failure is None:
        handler, failure = find_handler(target, host)
    if failure is not None:
        outcome.failure = failure
        return outcome
    assert handler is not None
    stacks = handler.path("stacks")
    try:
        fd = runtime.open_owned(stacks, os.O_RDWR, handler.uid)
    except OSError as exc:
        refused = isinstance(exc, (PermissionError, runtime.NotOwned))
        kind = FailureKind.PERMISSION if refused else FailureKind.NO_HANDLER
        outcome.failure = target.failure(
            Stage.ATTACH,
            f"cannot open {stacks}: {exc.strerror or exc}",
            "run as the job's user, or as root",
            kind,
        )
        return outcome
    now = time.monotonic()
    ends = now + timeout if deadline is None else min(now + timeout, deadline)
    # Another rankscope dumping this process: wait for it (it empties the file too).
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= ends:
                os.close(fd)
                outcome.failure = target.failure(
                    Stage.DUMP,
                    "another rankscope held its stack file until the deadline",
                    "wait for the other run to finish, then rerun",
                    FailureKind.TIMED_OUT,
                )
                return outcome
            time.sleep(POLL)
    os.ftruncate(fd, 0)
    request_id = secrets.token_hex(8)
    pending = _Pending(outcome, handler, fd, request_id, ends)
    if not _request(handler, "threads", request_id):
        pending.names = {}  # no request thread: threads are named by role only
    try:
        os.kill(target.pid, handler.signum)
    except OSError as exc:
        os.close(fd)
        outcome.failure = target.failure(
            Stage.DUMP,
            f"could not signal it: {exc.strerror}",
            "its log says whether it exited",
            FailureKind.GONE,
        )
        return outcome
    return pending


def _ends_line(fd: int, size: int) -> bool:
    return os.pread(fd, 1, size - 1) == b"\n"


def _headers(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith(("Thread 0x", "Current thread 0x")))


def _failed(pending: _Pending, failure: Failure) -> DumpOutcome:
    pending.outcome.failure = failure
    return pending.outcome


def _finish(pending: _Pending, intern: dict[Frame, Frame]) -> DumpOutcome:
    outcome, handler = pending.outcome, pending.handler
    target = outcome.target
    try:
        threads = parse_faulthandler(
            pending.text,
            target.pid,
            main_ident=handler.main_thread,
            names=pending.names,
            skip=handler.handler_thread,
            intern=intern,
        )
    except ValueError as exc:
        return _failed(
            pending,
            target.failure(
                Stage.PARSE,
                f"unreadable dump in {handler.path('stacks')}: {exc}",
                "rerun",
                FailureKind.BAD_OUTPUT,
            ),
        )
    outcome.snapshot = ProcessSnapshot(
        pid=target.pid, rank=target.rank, threads=threads, cmdline=target.cmdline
    )
    outcome.raw = as_pyspy_json(threads)
    return outcome


def collect_via_signal(
    targets: Sequence[Target],
    timeout: float,
    deadline: Optional[float] = None,
    progress: Optional[Callable[[int, int], None]] = None,
    stop: Optional[Stop] = None,
    host: Optional[str] = None,
) -> list[DumpOutcome]:
    """Dump every target through its in-process handler; outcomes in the targets' order."""
    host = host or short_hostname()
    intern: dict[Frame, Frame] = {}
    started = time.monotonic()
    results: dict[int, DumpOutcome] = {}
    pending: list[_Pending] = []
    for index, target in enumerate(targets):
        begun = _start(target, host, timeout, deadline)
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
                _failed(
                    item,
                    item.outcome.target.failure(
                        Stage.INTERRUPTED,
                        f"not dumped: {stop.name} stopped the run",
                        "run again",
                        FailureKind.OTHER,
                    ),
                )
                os.close(item.stacks_fd)
            break
        time.sleep(POLL)
        now = time.monotonic()
        for item in list(pending):
            finished: Optional[DumpOutcome] = None
            if not item.done_at:
                if item.names is None:
                    item.names = _read_names(item)
                size = os.fstat(item.stacks_fd).st_size
                if size != item.size:
                    item.size, item.size_since = size, now
                elif size > 0 and _ends_line(item.stacks_fd, size):
                    # Complete when it settled, or sooner: unchanged for one poll and holding as many
                    # threads as the process named.
                    settled = now - item.size_since >= SETTLE
                    text = ""
                    if not settled and item.names:
                        text = os.pread(item.stacks_fd, min(size, STACKS_MAX), 0).decode("utf-8", "replace")
                    if settled or (text and _headers(text) >= len(item.names or ())):
                        if not text:
                            text = os.pread(item.stacks_fd, min(size, STACKS_MAX), 0).decode(
                                "utf-8", "replace"
                            )
                        item.text = text
                        item.done_at = now
                        item.names_until = min(now + NAMES_WAIT, item.ends)
            if item.done_at:
                if item.names is None:
                    item.names = _read_names(item)
                if item.names is not None or now >= item.names_until:
                    if item.names and not item.recounted and _headers(item.text) < len(item.names):
                        # Fewer threads than the process has: perhaps a dump still being written (its
                        # writer preempted). Wait for it to settle once more (a thread started since the
                        # dump, or more than faulthandler's 100, would never match: once is enough).
                        item.recounted, item.done_at, item.size = True, 0.0, -1
                        continue
                    finished = _finish(item, intern)
            elif now >= item.ends:
                target = item.outcome.target
                state = procfs.process(target.pid)
                letter = state.state if state is not None else "gone"
                finished = _failed(
                    item,
                    target.failure(
                        Stage.DUMP,
                        f"no stack dump within {item.ends - started:.1f}s of {item.handler.signal_name}"
                        f" (process state {letter})",
                        "a stopped process (T) runs no signal handler until continued; one in the kernel (D) "
                        "not until it returns: try py-spy (without --via-signal), or raise --timeout",
                        FailureKind.TIMED_OUT,
                    ),
                )
            if finished is not None:
                finished.seconds = now - started
                os.close(item.stacks_fd)  # releases the lock
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
        handler, failure = find_handler(answer.target, host)
        if handler is None:
            answer.problem = failure.reason if failure is not None else "no in-process handler"
            answer.no_handler = True
            continue
        answer.handler = handler
        if kind not in handler.kinds:
            answer.problem = f"its handler does not answer {kind!r} requests (an older rankscope in the job)"
            continue
        answer.request_id = secrets.token_hex(8)
        if not _request(handler, kind, answer.request_id, {"id": answer.request_id}):
            answer.problem = "its handler's request thread does not read its requests"
            continue
        waiting.append(answer)
    while waiting:
        for answer in list(waiting):
            assert answer.handler is not None
            path = answer.handler.path(f"{answer.request_id}.reply")
            try:
                reply = json.loads(runtime.read_owned(path, answer.handler.uid, REPLY_MAX))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                reply = {"ok": False, "error": f"unreadable reply: {exc}"}
            with contextlib.suppress(OSError):
                os.unlink(path)
            if isinstance(reply, dict) and reply.get("ok"):
                answer.result = reply.get("result")
            else:
                error = reply.get("error") if isinstance(reply, dict) else None
                answer.problem = f"its handler answered with an error: {error or 'no answer'}"
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
            record = progress_file.read(os.path.join(directory, name))
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
