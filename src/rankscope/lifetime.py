"""The one process-lifetime rule for everything rankscope starts (docs/shared-node.md).

- Every child runs in a process group of its own (:func:`start_group`) and is ended as a
  whole: SIGTERM to the group, SIGKILL after a short grace, on its deadline, on SIGINT or
  SIGTERM to rankscope, and when rankscope is done with it.
- SIGINT and SIGTERM to rankscope are data while children run (:class:`StopSignals`): the
  handler records the signal and wakes the caller's selector through a pipe; the caller ends
  its children, reports what it has, and exits with 128 + the signal number.
- A child that puts its own children into a session of their own (pdsh's ssh clients) is out of
  reach of a group kill. While :class:`Orphans` is active rankscope is their child subreaper
  (``PR_SET_CHILD_SUBREAPER``): when their parent dies they become rankscope's children, are
  found by their parent pid in /proc and killed. Every child carries :data:`STARTED_BY` in its
  environment, so an orphan is told apart by the child it came from. An ssh ControlPersist
  master (``ssh: PATH [mux]``) is the one exception: the user asked for it to outlive the run,
  and its ``ControlPersist`` time ends it.
- A remote command runs under a watcher that kills it when the connection drops
  (:func:`rankscope.cluster.transports.remote_script`); the local side keeps the transport's
  stdin open (and silent) for as long as the node runs: its end of file is the signal.

Shared module: stdlib and ``procfs`` only.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import subprocess

from rankscope import procfs

#: Set in every child's environment: ``<rankscope pid>:<serial>``; inherited by whatever the child starts.
STARTED_BY = "RANKSCOPE_STARTED_BY"
#: After SIGTERM, how long a group gets to end before SIGKILL.
TERM_GRACE = 1.0

_serial = itertools.count(1)


def new_token() -> str:
    """A fresh :data:`STARTED_BY` value for one child."""
    return f"{os.getpid()}:{next(_serial)}"


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group ``pgid``; False when it is gone (or not ours)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def start_group(
    argv: list[str],
    env: Optional[Mapping[str, str]] = None,
    hold_stdin: bool = False,
    new_session: bool = True,
    mark: bool = True,
    **popen: Any,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``argv`` as the leader of a process group of its own; (the process, its token).

    ``new_session``: a session too (no controlling terminal: a transport never reads the
    user's terminal); otherwise only a group (``prefix``, whose child keeps the terminal).
    ``hold_stdin``: stdin is a pipe rankscope keeps open and never writes; it closes when
    rankscope is done with the child or dies, which is how a remote watcher learns it.
    ``mark``: put :data:`STARTED_BY` in its environment (what :class:`Orphans` goes by).
    Other keyword arguments go to :class:`subprocess.Popen` (stdout, stderr).
    """
    import subprocess  # not at import time: `stacks` on one node needs only StopSignals from here

    token = new_token()
    child_env = dict(os.environ if env is None else env)
    if mark:
        child_env[STARTED_BY] = token
    if hold_stdin:
        popen["stdin"] = subprocess.PIPE
    else:
        popen.setdefault("stdin", subprocess.DEVNULL)
    if new_session:
        popen["start_new_session"] = True
    else:
        popen["preexec_fn"] = os.setpgrp  # before any thread starts: prefix starts its child first
    process = subprocess.Popen(argv, env=child_env, **popen)
    return process, token


def end_group(process: subprocess.Popen[bytes], grace: float = TERM_GRACE) -> None:
    """SIGTERM to the group of ``process``, SIGKILL after ``grace``; waits for ``process`` itself."""
    import subprocess

    signal_group(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace)
    signal_group(process.pid, signal.SIGKILL)
    process.wait()


class StopSignals:
    """SIGINT and SIGTERM recorded instead of ending the process, for as long as the block runs.

    ``fd`` becomes readable at the first signal (register it in a selector); ``signum`` is the
    first signal, ``count`` how many came. Main thread only.

    SIGINT is caught even when rankscope started with it ignored (a background job of a
    non-interactive shell, ``cmd &`` in a script): there it took the whole node timeout to end a
    run; rankscope is a tool a person stops, and a run that ends early still reports what it has.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self.count = 0
        self._read, self._write = -1, -1
        self._previous: dict[int, Any] = {}

    @property
    def fd(self) -> int:
        return self._read

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def _handle(self, signum: int, _frame: object) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
        with contextlib.suppress(OSError):
            os.write(self._write, b"!")

    def drain(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._read, 64):
                pass

    def __enter__(self) -> StopSignals:
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        for fd in (self._read, self._write):
            os.close(fd)
        self._read, self._write = -1, -1


_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _prctl(option: int, value: Any) -> bool:
    try:
        import ctypes  # only here: the one place rankscope needs it

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


class Orphans:
    """While active, rankscope adopts what its children orphan, and :meth:`end` kills it.

    ``known``: the pids of children the caller still runs (and reaps itself): never touched.
    """

    def __init__(self) -> None:
        self.active = False
        self._was: Optional[int] = None

    def __enter__(self) -> Orphans:
        import ctypes

        was = ctypes.c_int(0)
        if _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was)) and _prctl(_PR_SET_CHILD_SUBREAPER, 1):
            self._was, self.active = was.value, True
        return self

    def __exit__(self, *_exc: object) -> None:
        self.end(set())
        if self.active and not self._was:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)
        self.active = False

    def adopted(self, known: set[int]) -> list[procfs.ProcfsEntry]:
        """Children of rankscope that it did not start itself (orphans of its children)."""
        if not self.active:
            return []
        me = os.getpid()
        return [p for p in procfs.table().values() if p.ppid == me and p.pid not in known]

    def end(self, known: set[int], token: Optional[str] = None) -> int:
        """Kill (by group) and reap the adopted orphans, only those of the child ``token`` if given.

        Only processes that carry this rankscope's :data:`STARTED_BY` are touched. An orphan that
        already exited is left as it is: its zombie holds nothing but a pid, and reaping children
        rankscope cannot attribute could take an exit status from the code that started them.
        Returns how many were killed.
        """
        killed = 0
        for orphan in self.adopted(known):
            if orphan.state == "Z" or _is_ssh_master(orphan):
                continue
            came_from = orphan.variable(STARTED_BY)
            if came_from is None or not came_from.startswith(f"{os.getpid()}:"):
                continue  # not started by this rankscope: leave it be
            if token is not None and came_from != token:
                continue
            pgid = _pgid(orphan.pid)
            if pgid is not None and pgid != os.getpgrp():
                signal_group(pgid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(orphan.pid, signal.SIGKILL)
            _reap(orphan.pid)
            killed += 1
        return killed


def _is_ssh_master(process: procfs.ProcfsEntry) -> bool:
    """An ssh ControlPersist master: it names itself ``ssh: CONTROL_PATH [mux]``."""
    words = process.cmdline
    return bool(words) and words[0].startswith("ssh: ") and words[-1].endswith("[mux]")


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _reap(pid: int, timeout: float = 2.0) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() >= end:
            return
        time.sleep(0.005)
