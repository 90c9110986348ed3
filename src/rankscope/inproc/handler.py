"""The in-process handler: stacks without ptrace, and a request channel for what needs Python code.

``rankscope.inproc.enable()`` (or ``RANKSCOPE_INPROC=1`` in the environment: the ``.pth`` file
installed with rankscope enables it at interpreter start, see :mod:`rankscope.inproc.bootstrap`)
prepares, in the process's private runtime directory (:mod:`rankscope.inproc.runtime`):

- ``<base>.req``: a FIFO read by a daemon thread (``rankscope-inproc``). A request is one line of
  JSON, ``{"v": 2, "id": "<hex>", "kind": "<kind>", "args": {...}}``, written in one ``write``
  (at most 4096 bytes, so it is atomic); the answer is ``<base>.<id>.reply``, JSON
  ``{"v": 2, "id", "kind", "ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``,
  written to a temporary name and renamed, so a reader never sees half of it. The requester
  removes the reply after reading it. Kinds are a registry: :func:`register_request`. Built in:
  ``stacks`` (every thread's Python stack, see :func:`_stacks`), ``ping``, ``threads`` (the names
  of the threads), ``fr`` (the flight recorder written to ``<base>.<id>.fr``, see :func:`_fr`;
  torch is imported only by the job, never by the handler), ``fr_status`` (how far the recorder
  has got: a few numbers per process group, :mod:`rankscope.inproc.frstatus`).
- ``<base>.inproc``: this description (JSON): pid, host, rank, the main thread's identifier, the
  files' names, the request kinds known, the protocol version, the process start time.
- ``<base>.crash``: faulthandler's C-level dump of every thread when the process dies of a fatal
  signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL), unless the process enabled faulthandler itself.
- ``<base>.term``: the same dump when the process receives SIGTERM (a launcher's teardown), chained
  to the SIGTERM handling it had (:func:`_enable_term_dump`). Both dumps are kept when not empty.

No signal handler walks the threads: the stacks are taken by the handler's own thread, under the
GIL, from ``sys._current_frames()`` (protocol 1 had faulthandler dump from a signal handler, which
crashed processes that start and end threads while being dumped). So no rate or timing of requests
can crash the process; the cost of a request is the GIL held for the dump (well under a millisecond
for a few threads) and a dumps are at most one per :data:`MIN_INTERVAL` (requests that arrive
together share one dump). The crash dump is made only when the process is dying anyway; the
previous handlers of those signals run after it (faulthandler chains them).

``<base>`` is ``<host>.[rank-<r>.]pid-<pid>``. Everything is removed at a normal exit; a crash
leaves the files (the reader checks the pid's start time against the description's).

Never raises into the training process: :func:`enable` returns False when it could not enable
(the reason is :func:`last_error`). Python 3.9 compatible, standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from typing import Any, Callable, Optional

from rankscope import procfs
from rankscope.inproc import runtime

#: The request protocol. 1: stacks by faulthandler from a signal handler; 2: the ``stacks`` request.
VERSION = 2
#: The signal protocol 1 used. Written into the description (a protocol-1 rankscope reads it, finds
#: it not caught, and does not signal); never caught since protocol 2.
LEGACY_SIGNAL_OFFSET = 4
REQUEST_MAX = 4096
#: The least time between two stack dumps: requests that come faster share one dump.
MIN_INTERVAL = 0.02
#: faulthandler's limits, kept so a dump reads the same: frames per thread, threads per dump.
MAX_FRAMES = 100
MAX_THREADS = 100
_ID = re.compile(r"^[0-9a-f]{1,32}$")

RequestHandler = Callable[[dict[str, Any]], Any]
_kinds: dict[str, RequestHandler] = {}
_lock = threading.Lock()
_state: Optional[_Enabled] = None
_error = ""


def legacy_signal() -> int:
    return int(signal.SIGRTMIN) + LEGACY_SIGNAL_OFFSET


def register_request(kind: str, handler: RequestHandler) -> None:
    """Answer requests of ``kind`` with ``handler(args)`` (its return value must be JSON-able).

    Called in the process (by rankscope itself, or by a library that adds a kind) before or after
    :func:`enable`; the description file lists the kinds.
    The handler runs on the handler's daemon thread; an exception it raises becomes an
    ``{"ok": false, "error": ...}`` answer.
    """
    _kinds[kind] = handler
    state = _state
    if state is not None:
        with contextlib.suppress(Exception):
            state.describe()


def request_kinds() -> list[str]:
    return sorted(_kinds)


def _ping(args: dict[str, Any]) -> Any:
    return {"pid": os.getpid(), "kinds": request_kinds(), "python": sys.version.split()[0], "v": VERSION}


def _threads(args: dict[str, Any]) -> Any:
    """Every Python thread: identifier (as faulthandler prints it) -> [name, native thread id, daemon]."""
    return {
        str(t.ident): [t.name, getattr(t, "native_id", None), t.daemon]
        for t in threading.enumerate()
        if t.ident is not None
    }


def format_stacks(frames: dict[int, Any], current: int) -> str:
    """Threads' frames in faulthandler's text (most recent call first), as its ``all_threads`` dump.

    ``frames`` is ``sys._current_frames()``; ``current`` the identifier written as the current thread.
    At most :data:`MAX_FRAMES` frames per thread (a cut stack ends with ``  ...``) and
    :data:`MAX_THREADS` threads (a cut dump ends with ``...``).
    """
    lines: list[str] = []
    for count, (ident, frame) in enumerate(sorted(frames.items(), key=lambda item: item[0] != current)):
        if count >= MAX_THREADS:
            lines.append("...")
            break
        if lines:
            lines.append("")
        title = "Current thread" if ident == current else "Thread"
        lines.append(f"{title} 0x{ident:016x} (most recent call first):")
        depth = 0
        while frame is not None:
            if depth >= MAX_FRAMES:
                lines.append("  ...")
                break
            code = frame.f_code
            line = frame.f_lineno
            lines.append(
                f'  File "{code.co_filename}", line {"???" if line is None else line} in {code.co_name}'
            )
            frame = frame.f_back
            depth += 1
        if not depth:
            lines.append("  <no Python frame>")
    return "\n".join(lines) + "\n"


def _stacks(args: dict[str, Any]) -> Any:
    """Every thread's Python stack, taken on this thread under the GIL; with the threads' names.

    ``{"text": <faulthandler's all-threads text>, "threads": <as the threads request>, "current":
    <this thread's identifier>}``. ``sys._current_frames()`` reads the threads' states under the
    interpreter's own lock and the GIL: a thread starting or ending meanwhile is seen or not, never half.
    """
    frames = sys._current_frames()
    text = format_stacks(frames, threading.get_ident())
    del frames
    return {"text": text, "threads": _threads(args), "current": threading.get_ident()}


def _main_thread_still(samples: int = 4, gap: float = 0.05) -> bool:
    """Whether the main thread stays at one instruction of one frame for ``samples`` looks ``gap`` apart:
    blocked (in a collective that hangs, say) rather than running the job's loop."""
    main = threading.main_thread().ident
    if main is None:
        return False
    first = sys._current_frames().get(main)
    if first is None:
        return False
    where = first.f_lasti
    for _ in range(samples - 1):
        time.sleep(gap)
        now = sys._current_frames().get(main)
        if now is not first or now.f_lasti != where:
            return False
    return True


def _fr(args: dict[str, Any]) -> Any:
    """This rank's flight recorder (every entry, with frames), written beside the handler's files.

    ``args``: ``{"id": "<hex>"}`` names the file ``<base>.<id>.fr`` (one per request: two requesters
    never read each other's); ``{"only_active": true}`` keeps only entries not yet completed. Entries
    carry their Python frames when that costs the job nothing: torch's symbolizer is already imported,
    or the main thread is blocked (the job hangs); else (a running job's first dump) they are left out,
    and the answer's problem says so; ``{"frames": true}`` asks for them anyway. The
    answer is ``{"name": "<file name>", "problem": null, "groups": {"<pg name>": [ranks]}}`` (the
    groups this rank belongs to: gloo's recorder does not name them), or ``{"name": null, "problem": "why"}``
    (torch not imported, no recorder in this torch), or both when the file was written but the recorder
    was turned off. torch is never imported here: only a process that imported it has a recorder.
    """
    state = _state
    if state is None or state.pid != os.getpid():
        return {"name": None, "problem": "the in-process handler is not enabled in this process"}
    ident = str(args.get("id") or "0")
    if not _ID.match(ident):
        raise ValueError(f"bad request id {ident!r}")
    from rankscope.inproc.frdump import dump_flight_recorder, group_members

    name = state.name(f"{ident}.fr")
    frames = args.get("frames") is True or "torch._inductor" in sys.modules or _main_thread_still()
    problem = dump_flight_recorder(os.path.join(state.directory, name), bool(args.get("only_active")), frames)
    written = problem is None or problem.startswith("written")
    answer: dict[str, Any] = {"name": name if written else None, "problem": problem}
    if written:
        answer["groups"] = group_members()
    return answer


_kinds["stacks"] = _stacks
_kinds["ping"] = _ping
_kinds["threads"] = _threads
_kinds["fr"] = _fr


def _fr_status(args: dict[str, Any]) -> Any:
    """Each process group's newest collective enqueued and completed (:mod:`rankscope.inproc.frstatus`)."""
    from rankscope.inproc.frstatus import recorder_status

    return recorder_status(args)


_kinds["fr_status"] = _fr_status


def _version_problem(request: dict[str, Any]) -> Optional[str]:
    """Why a request of another protocol cannot be answered (None when it can).

    An older requester's requests are answered (the kinds it knows kept their meaning); a newer one's
    are refused with both versions named, so its user is told to install the same rankscope in the job.
    """
    version = request.get("v")
    if type(version) is not int or version < 1:
        return f"request without a protocol version (this process's rankscope speaks {VERSION})"
    if version > VERSION:
        return (
            f"the request is of in-process protocol {version}, the job's rankscope speaks {VERSION} "
            "(an older rankscope in the job): install the same rankscope in the job's environment"
        )
    return None


class _Enabled:
    def __init__(self, directory: str, dir_fd: int, base: str) -> None:
        self.pid = os.getpid()
        self.directory = directory
        self.dir_fd = dir_fd
        self.base = base
        self.fifo_fd = -1
        self.crash_fd = -1
        self.term_fd = -1
        self.created: list[str] = []
        #: The identifier of the daemon thread answering requests (rankscope's, not the job's).
        self.thread_ident: Optional[int] = None
        self.last_dump = 0.0

    def name(self, kind: str) -> str:
        return f"{self.base}.{kind}"

    def describe(self) -> None:
        from rankscope.inproc.progress import self_start_ticks

        legacy = legacy_signal()
        info = {
            "version": VERSION,
            "pid": self.pid,
            "start_ticks": self_start_ticks(),
            "base": self.base,
            "signal": legacy,
            "signal_name": f"SIGRTMIN+{LEGACY_SIGNAL_OFFSET}",
            "main_thread": threading.main_thread().ident,
            "handler_thread": self.thread_ident,
            "requests": self.name("req"),
            "crash": self.name("crash") if self.crash_fd >= 0 else None,
            "term": self.name("term") if self.term_fd >= 0 else None,
            "kinds": request_kinds(),
            "python": sys.version.split()[0],
            "pid_namespace": procfs.pid_namespace(),
        }
        self.write_atomic(self.name("inproc"), json.dumps(info).encode())

    def write_atomic(self, name: str, data: bytes) -> None:
        temporary = f".{name}.tmp"
        fd = runtime.open_file(self.dir_fd, temporary, os.O_WRONLY | os.O_TRUNC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=self.dir_fd)
            raise
        os.close(fd)
        os.rename(temporary, name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        if name not in self.created and not name.endswith(".reply"):
            self.created.append(name)

    def serve(self) -> None:
        """The daemon thread: read request lines from the FIFO, answer each.

        Lines that arrive together are answered together: their ``stacks`` requests share one dump.
        """
        pending = b""
        while True:
            try:
                chunk = os.read(self.fifo_fd, REQUEST_MAX)
            except OSError:
                return
            if not chunk:
                return
            pending += chunk
            lines = pending.split(b"\n")
            pending = lines.pop()
            with contextlib.suppress(Exception):
                self.answer_all(lines)
            if len(pending) > REQUEST_MAX:
                pending = b""

    def answer_all(self, lines: list[bytes]) -> None:
        shared: dict[str, Any] = {}
        for line in lines:
            with contextlib.suppress(Exception):
                self.answer(line, shared)

    def answer(self, line: bytes, shared: dict[str, Any]) -> None:
        request = json.loads(line)
        if not isinstance(request, dict):
            return
        ident = str(request.get("id", ""))
        if not _ID.match(ident):
            return
        kind = str(request.get("kind", ""))
        reply: dict[str, Any] = {"v": VERSION, "id": ident, "kind": kind}
        handler = _kinds.get(kind)
        problem = _version_problem(request)
        if problem is not None:
            reply.update(ok=False, error=problem)
        elif handler is None:
            reply.update(
                ok=False, error=f"unknown request kind {kind!r} (known: {', '.join(request_kinds())})"
            )
        else:
            try:
                args = request.get("args") or {}
                if kind == "stacks":
                    if "stacks" not in shared:
                        wait = self.last_dump + MIN_INTERVAL - time.monotonic()
                        if wait > 0:
                            time.sleep(wait)
                        shared["stacks"] = handler({})
                        self.last_dump = time.monotonic()
                    result = shared["stacks"]
                else:
                    result = handler(args if isinstance(args, dict) else {})
                reply.update(ok=True, result=result)
            except Exception as exc:  # noqa: BLE001
                reply.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        self.write_atomic(self.name(f"{ident}.reply"), json.dumps(reply, default=str).encode())

    def close(self) -> None:
        """At a normal exit: close and remove what this process created.

        faulthandler is left as it is (the job may have enabled its own since), and so is the crash
        file's descriptor: a crash later in the exit still writes into a file of its own (unlinked),
        never into whatever file would reuse the descriptor's number.
        """
        if self.pid != os.getpid():
            return
        if self.fifo_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fifo_fd)
        leftovers: list[str] = []
        with contextlib.suppress(OSError):  # recorder dumps and replies a requester did not remove
            leftovers = [
                n
                for n in os.listdir(self.dir_fd)
                if n.startswith(self.base + ".") and (".fr" in n or n.endswith(".reply"))
            ]
        for name in [*self.created, *leftovers]:
            if name.endswith(DUMP_SUFFIXES) and _not_empty(self.dir_fd, name):
                continue  # a dump of a signal the process lived through (a handler of the job's): kept
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self.dir_fd)
        with contextlib.suppress(OSError):
            os.close(self.dir_fd)


#: The dump of a signal a process may live through (SIGTERM to a job with a handler): kept when not empty.
DUMP_SUFFIXES = (".term",)


def _not_empty(dir_fd: int, name: str) -> bool:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size > 0
    except OSError:
        return False


#: Kinds of files the handler creates and removes (the progress file is left for reading after a
#: crash, and so is a crash dump that is not empty).
HANDLER_KINDS = ("inproc", "req", "stacks")


def _read_description(dir_fd: int, name: str) -> Any:
    """A description file of this directory: only a regular file, never a FIFO or a link (bounded)."""
    import stat

    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        return json.loads(os.read(fd, 1 << 16))
    finally:
        os.close(fd)


def _remove_stale(dir_fd: int, host: str) -> None:
    """Remove handler files of processes of this host that are gone (killed: no atexit ran).

    Only where the description says the process lived in this pid namespace (containers sharing a
    /tmp see other pids); files without a readable description are left alone.
    """
    names = os.listdir(dir_fd)
    namespace = procfs.pid_namespace()
    for name in names:
        parsed = runtime.parse_name(name)
        if parsed is None or parsed[0] != host or parsed[3] != "inproc":
            continue
        try:
            os.kill(parsed[2], 0)
            continue
        except ProcessLookupError:
            pass
        except OSError:
            continue  # alive, another user's
        try:
            info = _read_description(dir_fd, name)
            if not namespace or info.get("pid_namespace") != namespace:
                continue
        except (OSError, ValueError, AttributeError):
            continue
        base = name[: -len(".inproc")]
        for other in names:
            kind = other[len(base) + 1 :] if other.startswith(base + ".") else ""
            empty_crash = False
            if kind in ("crash", "term"):
                with contextlib.suppress(OSError):
                    empty_crash = os.stat(other, dir_fd=dir_fd, follow_symlinks=False).st_size == 0
            if kind in HANDLER_KINDS or kind.endswith((".reply", ".fr")) or empty_crash:
                with contextlib.suppress(OSError):
                    os.unlink(other, dir_fd=dir_fd)


def _enable_crash_dump(state: _Enabled) -> None:
    """faulthandler on the fatal signals, into ``<base>.crash``, unless the process enabled it itself.

    Runs only in a process that is dying anyway; faulthandler then restores the signal's previous
    handler and raises it again, so the job's own handlers (and the exit status) are kept.
    """
    import faulthandler

    if faulthandler.is_enabled():
        return  # the job's own (PYTHONFAULTHANDLER, -X faulthandler, its code): left as it is
    name = state.name("crash")
    fd = runtime.open_file(state.dir_fd, name, os.O_WRONLY | os.O_APPEND | os.O_TRUNC)
    state.created.append(name)
    state.crash_fd = fd
    faulthandler.enable(file=fd, all_threads=True)


def _enable_term_dump(state: _Enabled) -> None:
    """faulthandler on SIGTERM, into ``<base>.term``, chained to whatever handled SIGTERM before.

    A launcher tears a job down with SIGTERM (torchrun when a rank failed or the scheduler ended it):
    the dump leaves each rank's last stacks even when the teardown is faster than any outside tool.
    faulthandler's C handler writes the dump, puts the previous disposition back, raises the signal
    again (so the default still ends the process with SIGTERM, and a Python handler the job set
    *before* this still runs, in the main thread, as it would have) and registers itself again.
    A Python handler the job sets *after* this replaces it (``signal.signal`` installs Python's own
    C handler): that job then leaves no ``.term``. A SIGTERM the job survives writes another dump
    after the first (the file is appended to). Not where the job registered faulthandler itself.
    """
    import faulthandler

    if faulthandler.is_enabled() or not hasattr(faulthandler, "register"):
        return  # the job's own faulthandler: left as it is
    name = state.name("term")
    fd = runtime.open_file(state.dir_fd, name, os.O_WRONLY | os.O_APPEND | os.O_TRUNC)
    state.created.append(name)
    state.term_fd = fd
    faulthandler.register(signal.SIGTERM, file=fd, all_threads=True, chain=True)


def _start() -> _Enabled:
    from rankscope.ranks import rank_from_env, short_hostname

    host = short_hostname()
    rank = rank_from_env(os.environ, host).rank
    directory = runtime.runtime_dir(os.environ, os.getuid())
    dir_fd = runtime.open_private_dir(directory)
    with contextlib.suppress(OSError):
        _remove_stale(dir_fd, host)
    state = _Enabled(directory, dir_fd, runtime.file_name(host, os.getpid(), "", rank)[:-1])
    try:
        fifo = state.name("req")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(fifo, dir_fd=dir_fd)  # a file of an earlier process of the same pid
        os.mkfifo(fifo, 0o600, dir_fd=dir_fd)
        state.created.append(fifo)
        # Read and write: the FIFO then always has a writer, so a read waits for data, never sees EOF.
        state.fifo_fd = os.open(fifo, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        with contextlib.suppress(Exception):
            _enable_term_dump(state)  # before the crash dump: it checks faulthandler is the job's own
        with contextlib.suppress(Exception):
            _enable_crash_dump(state)
        thread = threading.Thread(target=state.serve, name="rankscope-inproc", daemon=True)
        thread.start()
        state.thread_ident = thread.ident
        state.describe()
    except BaseException:
        state.close()
        raise
    return state


def enable() -> bool:
    """Enable the handler in this process (once; again after a fork). True when it is enabled.

    Never raises: on failure (no private runtime directory, a full file system) it returns False
    and :func:`last_error` says why. Installs no signal handler of its own (see the module's notes).
    """
    global _state, _error
    try:
        with _lock:
            if _state is not None and _state.pid == os.getpid():
                return True
            _state = _start()
            _error = ""
            import atexit

            atexit.register(_state.close)
            return True
    except Exception as exc:  # noqa: BLE001 - never into the training process
        _error = f"{type(exc).__name__}: {exc}"
        return False


def enabled() -> bool:
    state = _state
    return state is not None and state.pid == os.getpid()


def last_error() -> str:
    """Why the last :func:`enable` failed ("" when it did not)."""
    return _error


def description_path() -> Optional[str]:
    """The description file of this process's handler; ``None`` when not enabled."""
    state = _state
    if state is None or state.pid != os.getpid():
        return None
    return os.path.join(state.directory, state.name("inproc"))


def _after_fork_in_child() -> None:
    """A forked child (a data-loader worker) is not the process the files describe: stop using them."""
    global _state
    state = _state
    if state is None:
        return
    _state = None
    # faulthandler and its descriptor stay: a worker that dies of a fatal signal appends its dump to
    # the crash file (and the job's own faulthandler, if it enabled one since, is not touched).
    if state.term_fd >= 0:  # a worker's SIGTERM dump would mix into its parent's file
        with contextlib.suppress(Exception):
            import faulthandler

            faulthandler.unregister(signal.SIGTERM)
    for fd in (state.fifo_fd, state.dir_fd):
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
