"""Requests to ranks' in-process handlers, without ptrace or a signal.

For a target: find its runtime directory from its own environment and uid
(:mod:`rankscope.inproc.runtime`), read the handler's description (``<base>.inproc``), check that
the process is the one described (its start time) and which protocol its handler speaks
(:func:`find_handler`); write a request line into its FIFO (:func:`send_request`) and read the reply
file its handler thread writes (:func:`read_reply`). Every file is opened without waiting (a FIFO
planted in its place is refused, never waited on). :func:`request_all` asks every target for one
kind at once and waits for the answers until a deadline; the stacks collector
(:mod:`rankscope.stacks.inproc_collect`) builds on the same pieces.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from rankscope import procfs
from rankscope.inproc import progress as progress_file
from rankscope.inproc import runtime
from rankscope.inproc.handler import VERSION
from rankscope.model import Failure, FailureKind, Stage
from rankscope.ranks import short_hostname
from rankscope.stacks.collect import Stop, Target

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


def send_request(
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


def read_reply(handler: Handler, request_id: str, limit: int) -> Optional[dict[str, Any]]:
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
        answer.request_id = os.urandom(8).hex()  # not `secrets`: its import (hmac, hashlib) costs 6 ms
        if not send_request(handler, kind, answer.request_id, {"id": answer.request_id}, deadline, stop):
            answer.problem = "its handler's request thread does not read its requests"
            continue
        waiting.append(answer)
    while waiting:
        for answer in list(waiting):
            assert answer.handler is not None
            reply = read_reply(answer.handler, answer.request_id, REPLY_MAX)
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
