"""Pure: read the output of ``strace -f -tt -T -qq -o FILE`` into counts, blocked calls and failures.

Each line is ``TID HH:MM:SS.micro CALL``; CALL is one of

- ``name(args) = result <seconds>``, a call that started and ended while strace held it;
- ``name(args <unfinished ...>`` then, later, ``<... name resumed>rest) = result <seconds>``: another
  thread's line came in between;
- ``name(args <detached ...>`` (or an ``<unfinished ...>`` never resumed): the call was still
  running when tracing stopped. That is what the thread is blocked on now;
- ``+++ exited with N +++`` and ``--- SIGNAL {...} ---``: exits and signals, not calls.

A thread that waits with a timeout in a loop (gloo's event loop calls ``epoll_wait`` with 10 ms, and
under strace on a loaded machine it is as often between two calls as inside one when tracing stops)
is waiting too: its run of identical waits that each timed out is reported as blocked, with ``polls``.

A result is ``N``, ``0x...``, ``?``, or ``-1 ERRNO (message)``.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Optional

from rankscope.inspect.report import Blocked, FailureGroup, FdKind, OpenFd, SyscallCount

_LINE = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+(\d\d):(\d\d):(\d\d(?:\.\d+)?)\s+(.*)$")
_RESUMED = re.compile(r"^<\.\.\. ([\w]+) resumed>(.*)$")
_CALL = re.compile(r"^([\w]+)\((.*)$")
_ERROR = re.compile(r"^-1 (E[A-Z0-9_]+) \((.*)\)|^\? (E[A-Z0-9_]+) \((.*)\)")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_INET = re.compile(r'sin6?_port=htons\((\d+)\).*?(?:inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)")')
_UNIX = re.compile(r'sun_path=(@?"[^"]*")')
_POLL_FD = re.compile(r"\{fd=(\d+),")
_FIRST_INT = re.compile(r"^(\d+),")
_UNFINISHED = (" <unfinished ...>", " <detached ...>")

#: Errors that are routine in a healthy process: counted, folded into one line, never a finding.
NOISE = frozenset(
    {
        "EAGAIN",
        "EWOULDBLOCK",
        "ETIMEDOUT",
        "EINTR",
        "EINPROGRESS",
        "ERESTARTSYS",
        "ERESTARTNOINTR",
        "ERESTARTNOHAND",
        "ERESTART_RESTARTBLOCK",
    }
)
#: Calls whose first string argument is a path.
PATH_CALLS = frozenset(
    [
        "open",
        "openat",
        "openat2",
        "creat",
        "stat",
        "lstat",
        "stat64",
        "lstat64",
        "newfstatat",
        "statx",
        "access",
        "faccessat",
        "faccessat2",
        "mkdir",
        "mkdirat",
        "rmdir",
        "unlink",
        "unlinkat",
        "rename",
        "renameat",
        "renameat2",
        "link",
        "linkat",
        "symlink",
        "symlinkat",
        "readlink",
        "readlinkat",
        "execve",
        "execveat",
        "chdir",
        "chmod",
        "fchmodat",
        "chown",
        "lchown",
        "fchownat",
        "truncate",
        "mknod",
        "mknodat",
        "utimensat",
        "getxattr",
        "lgetxattr",
        "setxattr",
        "lsetxattr",
        "listxattr",
        "llistxattr",
        "removexattr",
        "inotify_add_watch",
        "statfs",
        "mount",
    ]
)
#: Calls that take a socket address (the address is the target, not the descriptor).
ADDRESS_CALLS = frozenset({"connect", "bind", "sendto", "sendmsg"})
_MAX_TARGETS = 5


@dataclass
class _Pending:
    name: str
    args: str
    started: float


#: Waits that return 0 when their timeout passes with nothing to report.
POLL_CALLS = frozenset({"epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6"})


@dataclass
class _Polling:
    """A thread's run of identical waits that each timed out."""

    name: str
    key: str
    args: str
    started: float
    count: int = 1


def _timed_out(name: str, result: str) -> bool:
    if name in POLL_CALLS:
        return result == "0" or result.startswith("0 ")
    return name == "futex" and "ETIMEDOUT" in result


def _wait_key(name: str, args: str) -> str:
    """What makes two waits the same wait: the call and its descriptor (or futex word)."""
    first = args.split(",", 1)[0]
    return f"{name}:{first}"


@dataclass
class TraceSummary:
    """What one trace says, before it is attached to a process."""

    lines: int = 0
    threads: int = 0
    syscalls: list[SyscallCount] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    failures: list[FailureGroup] = field(default_factory=list)


def _seconds_of_day(hours: str, minutes: str, seconds: str) -> float:
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _result_of(rest: str) -> tuple[str, str, Optional[float]]:
    """``args) = result <0.1>`` -> (args, result, 0.1).

    String searches from the right, not regular expressions: a busy process writes tens of
    thousands of lines a second, and this runs once per line.
    """
    duration = None
    if rest.endswith(">"):
        open_at = rest.rfind(" <")
        if open_at >= 0:
            try:
                duration = float(rest[open_at + 2 : -1])
                rest = rest[:open_at]
            except ValueError:
                pass
    # strace pads short calls: "write(3, "x", 1)  = -1 ENOSPC ..."; the last ") = " is the result's.
    equals = rest.rfind(" = ")
    while equals >= 0:
        args = rest[:equals].rstrip(" ")
        if args.endswith(")"):
            return args[:-1], rest[equals + 3 :].strip(), duration
        equals = rest.rfind(" = ", 0, equals)
    return rest, "", duration


def sockaddr_of(args: str) -> Optional[str]:
    """The address a connect/bind/sendto names: ``127.0.0.1:5000``, ``[::1]:5000``, a unix path."""
    inet = _INET.search(args)
    if inet:
        port, v4, v6 = inet.groups()
        return f"{v4}:{port}" if v4 else f"[{v6}]:{port}"
    unix = _UNIX.search(args)
    return f"unix {unix.group(1)}" if unix else None


def _fd_words(fd: int, fds: Mapping[int, OpenFd]) -> str:
    entry = fds.get(fd)
    return f"fd {fd}: {entry.describe()}" if entry else f"fd {fd}"


def target_of(name: str, args: str, fds: Mapping[int, OpenFd]) -> Optional[str]:
    """What a call names: its path, its socket address, or its descriptor in words."""
    if name in ADDRESS_CALLS:
        address = sockaddr_of(args)
        if address:
            return address
    if name in PATH_CALLS:
        quoted = _QUOTED.search(args)
        if quoted:
            return quoted.group(1)
    first = _FIRST_INT.match(args)
    if first:
        return _fd_words(int(first.group(1)), fds)
    return None


#: Kernel wait channels (/proc/PID/task/TID/wchan) of calls the kernel resumes with restart_syscall.
_WAIT_CHANNELS = (
    ("futex", "a futex wait with a timeout (a lock or condition): another thread must release or signal it"),
    ("nanosleep", "a sleep (nanosleep)"),
    ("ep_poll", "epoll_wait with a timeout"),
    ("poll", "poll with a timeout"),
    ("select", "select with a timeout"),
)


def describe_restart(wchan: Optional[str]) -> str:
    """A call resumed by restart_syscall, named by where the thread sleeps in the kernel (``wchan``).

    The attach interrupted a call with a timeout and the kernel resumed it as restart_syscall: strace
    no longer knows which call it was (its "resuming interrupted X" names the thread's last call it
    saw, often a different one), so the kernel's wait channel names it, or the line says it is unknown.
    """
    resumed = "interrupted by the attach and resumed by the kernel (restart_syscall)"
    for channel, words in _WAIT_CHANNELS:
        if wchan and channel in wchan:
            return f"{words}; {resumed}"
    if wchan and wchan != "0":
        return f"a call {resumed}; which call is not known (kernel wait channel {wchan})"
    return f"a call {resumed}; which call is not known"


def waits_on(name: str, args: str, fds: Mapping[int, OpenFd]) -> str:
    """What a blocked call waits for, in words (a socket's peer, a pipe, a lock, a child ...)."""
    if name in ("poll", "ppoll"):
        polled = [int(fd) for fd in _POLL_FD.findall(args)]
        return "; ".join(_fd_words(fd, fds) for fd in polled) if polled else "nothing (a sleep)"
    if name in ("epoll_wait", "epoll_pwait", "epoll_pwait2"):
        first = _FIRST_INT.match(args)
        epoll = fds.get(int(first.group(1))) if first else None
        if epoll is not None and epoll.kind == FdKind.EPOLL and epoll.watches:
            return "; ".join(_fd_words(fd, fds) for fd in epoll.watches)
        return _fd_words(int(first.group(1)), fds) if first else ""
    if name == "restart_syscall":
        return describe_restart(None)
    if name == "futex":
        return "a lock or condition (futex): another thread must release or signal it"
    if name in ("nanosleep", "clock_nanosleep"):
        return "sleeping"
    if name in ("wait4", "waitid"):
        return "a child process to exit"
    if name in ("select", "pselect6"):
        return "descriptors (select)"
    return target_of(name, args, fds) or ""


def summarise(
    lines: Iterable[str], fds: Mapping[int, OpenFd] = {}, ended_at: Optional[float] = None
) -> TraceSummary:
    """Counts, blocked calls and failures of one trace.

    ``fds``: the process's descriptors (read after tracing) to name what a descriptor is.
    ``ended_at``: when tracing stopped, in seconds of the day (strace's -tt clock); by default
    the last line's time.
    """
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    seconds: defaultdict[str, float] = defaultdict(float)
    pending: dict[int, _Pending] = {}
    detached: dict[int, _Pending] = {}
    threads: set[int] = set()
    failed: dict[str, tuple[str, Counter[str], Counter[str]]] = {}
    known_targets: dict[tuple[str, str], Optional[str]] = {}
    polling: dict[int, _Polling] = {}
    last = 0.0
    count = 0

    def finish(name: str, args: str, result: str, duration: Optional[float]) -> None:
        calls[name] += 1
        if duration is not None:
            seconds[name] += duration
        if not result.startswith(("-1 ", "? ")):
            return
        error = _ERROR.match(result)
        if not error:
            return
        code = error.group(1) or error.group(3)
        message = error.group(2) or error.group(4)
        errors[name] += 1
        if code not in failed:
            failed[code] = (message, Counter(), Counter())
        _message, by_call, targets = failed[code]
        by_call[name] += 1
        # A loop fails the same way each time: the target of identical arguments is worked out once.
        key = (name, args)
        target = (
            known_targets[key]
            if key in known_targets
            else known_targets.setdefault(key, target_of(name, args, fds))
        )
        if target:
            targets[target] += 1

    def note_wait(tid: int, name: str, args: str, result: str, started: float) -> None:
        if not _timed_out(name, result):
            polling.pop(tid, None)
            return
        key = _wait_key(name, args)
        run = polling.get(tid)
        if run is not None and run.key == key:
            run.count += 1
        else:
            polling[tid] = _Polling(name, key, args, started)

    for raw in lines:
        line = raw.rstrip("\n")
        match = _LINE.match(line)
        if not match:
            continue
        count += 1
        tid = int(match.group(1))
        threads.add(tid)
        when = _seconds_of_day(match.group(2), match.group(3), match.group(4))
        last = max(last, when)
        rest = match.group(5)
        if rest.startswith(("+++", "---")):
            if rest.startswith("+++"):
                pending.pop(tid, None)
            continue
        resumed = _RESUMED.match(rest)
        if resumed:
            started = pending.pop(tid, None)
            args_tail, result, duration = _result_of(resumed.group(2))
            args = (started.args if started else "") + args_tail
            finish(resumed.group(1), args, result, duration)
            note_wait(tid, resumed.group(1), args, result, started.started if started else when)
            continue
        call = _CALL.match(rest)
        if not call:
            continue
        name, tail = call.groups()
        for mark in _UNFINISHED:
            if tail.endswith(mark):
                entry = _Pending(name, tail[: -len(mark)], when)
                (detached if mark == " <detached ...>" else pending)[tid] = entry
                break
        else:
            args, result, duration = _result_of(tail)
            finish(name, args, result, duration)
            note_wait(tid, name, args, result, when)

    end = last if ended_at is None else max(ended_at, last)
    still = {**pending, **detached}
    blocked = [
        Blocked(
            tid, entry.name, entry.args, max(0.0, end - entry.started), waits_on(entry.name, entry.args, fds)
        )
        for tid, entry in sorted(still.items())
    ]
    # A thread between two calls of its polling loop when tracing stopped; two timeouts in a row at
    # least, so that one call that happened to time out is not taken for a wait.
    blocked += [
        Blocked(
            tid,
            run.name,
            run.args,
            max(0.0, end - run.started),
            waits_on(run.name, run.args, fds),
            polls=run.count,
        )
        for tid, run in sorted(polling.items())
        if tid not in still and run.count >= 2
    ]
    blocked.sort(key=lambda entry: entry.tid)
    syscalls = sorted(
        (SyscallCount(name, calls[name], errors[name], seconds[name]) for name in calls),
        key=lambda item: (-item.seconds, -item.calls, item.name),
    )
    groups = sorted(
        (
            FailureGroup(
                code,
                message,
                sum(by_call.values()),
                dict(by_call.most_common()),
                tuple(target for target, _ in targets.most_common(_MAX_TARGETS)),
                code in NOISE,
            )
            for code, (message, by_call, targets) in failed.items()
        ),
        key=lambda group: (group.noise, -group.count, group.errno),
    )
    return TraceSummary(count, len(threads), syscalls, blocked, groups)
