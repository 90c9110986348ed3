"""The in-process handler: stacks without ptrace, and a request channel for what needs Python code.

``rankscope.inproc.enable()`` (or ``RANKSCOPE_INPROC=1`` in the environment: the ``.pth`` file
installed with rankscope enables it at interpreter start, see :mod:`rankscope.inproc.bootstrap`)
prepares, in the process's private runtime directory (:mod:`rankscope.inproc.runtime`):

- ``<base>.stacks``: faulthandler is registered on :func:`default_signal` with this file
  (``all_threads=True``). On the signal, the interpreter's C-level handler writes every thread's
  Python stack there at once, even while a thread holds the GIL or is blocked in a collective.
  The requester truncates the file, sends the signal, and reads it when its size settles.
- ``<base>.req``: a FIFO read by a daemon thread (``rankscope-inproc``). A request is one line of
  JSON, ``{"v": 1, "id": "<hex>", "kind": "<kind>", "args": {...}}``, written in one ``write``
  (at most 4096 bytes, so it is atomic); the answer is ``<base>.<id>.reply``, JSON
  ``{"v": 1, "id", "kind", "ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``,
  written to a temporary name and renamed, so a reader never sees half of it. The requester
  removes the reply after reading it. Kinds are a registry: :func:`register_request`. Built in:
  ``ping``, ``threads`` (the names of the threads), ``fr`` (the flight recorder written to
  ``<base>.<id>.fr``, see :func:`_fr`; torch is imported only by the job, never by the handler).
- ``<base>.inproc``: this description (JSON): pid, host, rank, the signal's number and name, the
  main thread's identifier, the files' names, the request kinds known, the process start time.

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
from typing import Any, Callable, Optional

from rankscope.inproc import runtime

VERSION = 1
#: Overrides the dump signal (a number or a name such as ``SIGRTMIN+4``); see :func:`default_signal`.
ENV_SIGNAL = "RANKSCOPE_INPROC_SIGNAL"
#: How far above SIGRTMIN the default signal is.
RT_OFFSET = 4
REQUEST_MAX = 4096
_ID = re.compile(r"^[0-9a-f]{1,32}$")

RequestHandler = Callable[[dict[str, Any]], Any]
_kinds: dict[str, RequestHandler] = {}
_lock = threading.Lock()
_state: Optional[_Enabled] = None
_error = ""


def default_signal() -> int:
    """SIGRTMIN+4, unless ``RANKSCOPE_INPROC_SIGNAL`` names another.

    Not SIGUSR1/SIGUSR2 (SLURM's ``--signal``, submitit, PyTorch Lightning and others use them for
    preemption), nor SIGTERM/SIGINT/SIGHUP/SIGQUIT (torchrun's agent forwards them to stop the
    workers), nor the faulthandler crash signals. Real-time signals are free in CPython, torch and
    py-spy (which uses ptrace, no signal). Its default action ends a process: rankscope sends it
    only to a process whose /proc/PID/status shows it caught (SigCgt).
    """
    raw = os.environ.get(ENV_SIGNAL, "").strip()
    if raw:
        if raw.isdigit():
            return int(raw)
        name = raw.upper().replace(" ", "")
        if name.startswith("SIGRTMIN+") and name[9:].isdigit():
            return int(signal.SIGRTMIN) + int(name[9:])
        value = getattr(signal, name, None)
        if isinstance(value, int):
            return int(value)
    return int(signal.SIGRTMIN) + RT_OFFSET


def signal_name(signum: int) -> str:
    if int(signal.SIGRTMIN) <= signum <= int(signal.SIGRTMAX):
        return f"SIGRTMIN+{signum - int(signal.SIGRTMIN)}"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


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
    return {"pid": os.getpid(), "kinds": request_kinds(), "python": sys.version.split()[0]}


def _threads(args: dict[str, Any]) -> Any:
    """Every Python thread: identifier (as faulthandler prints it) -> [name, native thread id, daemon]."""
    return {
        str(t.ident): [t.name, getattr(t, "native_id", None), t.daemon]
        for t in threading.enumerate()
        if t.ident is not None
    }


def _fr(args: dict[str, Any]) -> Any:
    """This rank's flight recorder (every entry, with frames), written beside the handler's files.

    ``args``: ``{"id": "<hex>"}`` names the file ``<base>.<id>.fr`` (one per request: two requesters
    never read each other's); ``{"only_active": true}`` keeps only entries not yet completed. The
    answer is ``{"name": "<file name>", "problem": null}``, or ``{"name": null, "problem": "why"}``
    (torch not imported, no recorder in this torch), or both when the file was written but the recorder
    was turned off. torch is never imported here: only a process that imported it has a recorder.
    """
    state = _state
    if state is None or state.pid != os.getpid():
        return {"name": None, "problem": "the in-process handler is not enabled in this process"}
    ident = str(args.get("id") or "0")
    if not _ID.match(ident):
        raise ValueError(f"bad request id {ident!r}")
    from rankscope.inproc.frdump import dump_flight_recorder

    name = state.name(f"{ident}.fr")
    problem = dump_flight_recorder(os.path.join(state.directory, name), bool(args.get("only_active")))
    written = problem is None or problem.startswith("written")
    return {"name": name if written else None, "problem": problem}


_kinds["ping"] = _ping
_kinds["threads"] = _threads
_kinds["fr"] = _fr


class _Enabled:
    def __init__(self, directory: str, dir_fd: int, base: str, signum: int) -> None:
        self.pid = os.getpid()
        self.directory = directory
        self.dir_fd = dir_fd
        self.base = base
        self.signum = signum
        self.stacks_fd = -1
        self.fifo_fd = -1
        self.created: list[str] = []
        #: The identifier of the daemon thread answering requests (rankscope's, not the job's).
        self.thread_ident: Optional[int] = None

    def name(self, kind: str) -> str:
        return f"{self.base}.{kind}"

    def describe(self) -> None:
        from rankscope.inproc.progress import self_start_ticks

        info = {
            "version": VERSION,
            "pid": self.pid,
            "start_ticks": self_start_ticks(),
            "base": self.base,
            "signal": self.signum,
            "signal_name": signal_name(self.signum),
            "main_thread": threading.main_thread().ident,
            "handler_thread": self.thread_ident,
            "stacks": self.name("stacks"),
            "requests": self.name("req"),
            "kinds": request_kinds(),
            "python": sys.version.split()[0],
            "pid_namespace": _pid_namespace(),
        }
        self.write_atomic(self.name("inproc"), json.dumps(info).encode())

    def write_atomic(self, name: str, data: bytes) -> None:
        temporary = f".{name}.tmp"
        fd = runtime.open_file(self.dir_fd, temporary, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.rename(temporary, name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        if name not in self.created and not name.endswith(".reply"):
            self.created.append(name)

    def serve(self) -> None:
        """The daemon thread: read request lines from the FIFO, answer each."""
        pending = b""
        while True:
            try:
                chunk = os.read(self.fifo_fd, REQUEST_MAX)
            except OSError:
                return
            if not chunk:
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                with contextlib.suppress(Exception):
                    self.answer(line)
            if len(pending) > REQUEST_MAX:
                pending = b""

    def answer(self, line: bytes) -> None:
        request = json.loads(line)
        ident = str(request.get("id", ""))
        if not _ID.match(ident):
            return
        kind = str(request.get("kind", ""))
        reply: dict[str, Any] = {"v": VERSION, "id": ident, "kind": kind}
        handler = _kinds.get(kind)
        if handler is None:
            reply.update(
                ok=False, error=f"unknown request kind {kind!r} (known: {', '.join(request_kinds())})"
            )
        else:
            try:
                args = request.get("args") or {}
                reply.update(ok=True, result=handler(args if isinstance(args, dict) else {}))
            except Exception as exc:  # noqa: BLE001
                reply.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        self.write_atomic(self.name(f"{ident}.reply"), json.dumps(reply, default=str).encode())

    def close(self) -> None:
        """At a normal exit: unregister, close and remove what this process created."""
        if self.pid != os.getpid():
            return
        import faulthandler

        with contextlib.suppress(Exception):
            faulthandler.unregister(self.signum)
        for fd in (self.stacks_fd, self.fifo_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        leftovers: list[str] = []
        with contextlib.suppress(OSError):  # recorder dumps a requester did not remove
            leftovers = [n for n in os.listdir(self.dir_fd) if n.startswith(self.base + ".") and ".fr" in n]
        for name in [*self.created, *leftovers]:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self.dir_fd)
        with contextlib.suppress(OSError):
            os.close(self.dir_fd)


#: Kinds of files the handler creates (the progress file is left for reading after a crash).
HANDLER_KINDS = ("inproc", "stacks", "req")


def _pid_namespace() -> int:
    """The inode of this process's pid namespace (0 when unknown): pids mean something only inside it."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _remove_stale(dir_fd: int, host: str) -> None:
    """Remove handler files of processes of this host that are gone (killed: no atexit ran).

    Only where the description says the process lived in this pid namespace (containers sharing a
    /tmp see other pids); files without a readable description are left alone.
    """
    names = os.listdir(dir_fd)
    namespace = _pid_namespace()
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
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                info = json.loads(os.read(fd, 1 << 16))
            finally:
                os.close(fd)
            if not namespace or info.get("pid_namespace") != namespace:
                continue
        except (OSError, ValueError, AttributeError):
            continue
        base = name[: -len(".inproc")]
        for other in names:
            kind = other[len(base) + 1 :] if other.startswith(base + ".") else ""
            if kind in HANDLER_KINDS or kind.endswith((".reply", ".fr")):
                with contextlib.suppress(OSError):
                    os.unlink(other, dir_fd=dir_fd)


def _caught_here(signum: int) -> bool:
    """Whether this process already catches ``signum`` (SigCgt: C-level handlers too, not only Python's)."""
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return False


def _start(signum: Optional[int]) -> _Enabled:
    import faulthandler

    from rankscope.ranks import rank_from_env, short_hostname

    host = short_hostname()
    rank = rank_from_env(os.environ, host).rank
    directory = runtime.runtime_dir(os.environ, os.getuid())
    dir_fd = runtime.open_private_dir(directory)
    with contextlib.suppress(OSError):
        _remove_stale(dir_fd, host)
    state = _Enabled(directory, dir_fd, runtime.file_name(host, os.getpid(), "", rank)[:-1], signum or 0)
    try:
        state.signum = signum if signum is not None else default_signal()
        stacks = state.name("stacks")
        # O_APPEND: after the requester truncates the file, the next dump starts at its beginning.
        state.stacks_fd = runtime.open_file(dir_fd, stacks, os.O_WRONLY | os.O_APPEND | os.O_TRUNC)
        state.created.append(stacks)
        fifo = state.name("req")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(fifo, dir_fd=dir_fd)  # a file of an earlier process of the same pid
        os.mkfifo(fifo, 0o600, dir_fd=dir_fd)
        state.created.append(fifo)
        # Read and write: the FIFO then always has a writer, so a read waits for data, never sees EOF.
        state.fifo_fd = os.open(fifo, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        if _caught_here(state.signum):
            raise RuntimeError(
                f"{signal_name(state.signum)} is already caught in this process; "
                f"name another signal in {ENV_SIGNAL}"
            )
        faulthandler.register(state.signum, file=state.stacks_fd, all_threads=True, chain=False)
        thread = threading.Thread(target=state.serve, name="rankscope-inproc", daemon=True)
        thread.start()
        state.thread_ident = thread.ident
        state.describe()
    except BaseException:
        state.close()
        raise
    return state


def enable(signum: Optional[int] = None) -> bool:
    """Enable the handler in this process (once; again after a fork). True when it is enabled.

    Never raises: on failure (no private runtime directory, a signal that cannot be registered)
    it returns False and :func:`last_error` says why.
    """
    global _state, _error
    try:
        with _lock:
            if _state is not None and _state.pid == os.getpid():
                return True
            _state = _start(signum)
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
    """A forked child (a data-loader worker) is not the process the files describe: stop dumping into them."""
    global _state
    state = _state
    if state is None:
        return
    _state = None
    try:
        import faulthandler

        faulthandler.unregister(state.signum)
        os.close(state.stacks_fd)
        os.close(state.fifo_fd)
        os.close(state.dir_fd)
    except Exception:  # noqa: BLE001
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
