"""The one process-lifetime API: everything rankscope starts for its own work dies with it.

What it promises (docs/shared-node.md):

- :func:`start` runs a child with a deadline, in a session (or only a process group) of its own,
  its output captured up to a bound (:class:`Capture`), reaped exactly once (:meth:`Child.reap`);
  :meth:`Child.end` ends its whole tree (SIGTERM to the group and to every process that carries
  its token, SIGKILL after :data:`TERM_GRACE`) on its deadline, on SIGINT or SIGTERM to
  rankscope (:class:`StopSignals` as data, or :func:`sigterm_raises` as :class:`Terminated`), and
  when rankscope is done with it.
- **The parent's death, SIGKILL included**, is the guardian's (:mod:`rankscope.guardian`): one
  small process per rankscope process, started before its first child, in a session of its own,
  holding the read end of a pipe whose only write end rankscope holds. The kernel closes that end
  when rankscope dies, however it dies; at end of file the guardian ends every process that carries
  this run's id in :data:`STARTED_BY` (SIGTERM, SIGKILL after the grace), continues the targets
  rankscope noted that are left stopped (:func:`note_target`), and removes the paths it noted
  (:func:`note_path`, :func:`private_tempdir`: partial cores, strace output, gpu-test's directory).
- **The one kind of child that outlives rankscope** is the user's job started by a watcher:
  :func:`start_detached`. It gets no token, a session of its own, stdin from /dev/null, and is
  never noted, so neither :meth:`Child.end` nor the guardian touch it.

Why a guardian, and why it finds the tree by environment (measured on this machine, Linux 6.x,
torch 2.13 CPU, as root):

- ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits (a child started from
  a worker thread of ``core bt``'s pool would be killed when that thread ends, the process alive), it is
  lost across a set-uid exec, and it reaches only the direct child: gcore is a shell script whose
  gdb is a grandchild, and torchrun makes every worker a session leader (``setsid``), so neither
  its group nor its list of children reaches them once torchrun is gone.
- A cgroup per run would hold the tree, but needs cgroup v2 with a delegated subtree, which
  neither a non-root user nor most containers have.
- An environment variable is inherited through fork, exec, ``setsid`` and reparenting to pid 1;
  gcore's gdb, strace, py-spy and torchrun's workers all keep it. Reading every
  ``/proc/PID/environ`` took 3-5 ms of CPU per scan of 145 processes, and is done only when a tree
  is ended. A process that clears its environment escapes (none of the tools here does).
- Before: SIGKILL of ``rankscope core grab`` left gcore and gdb running under pid 1 holding the
  target in tracing stop until the core was written (0644 meanwhile); of ``rankscope strace PID
  --seconds 60`` after 3 s left strace attached (its output grew 13 MB in 26 s); of ``gpu-test``
  left torchrun and its workers under pid 1 and ``/tmp/rankscope-gputest-*`` behind. After: the
  guardian's scan ends them within the grace, and gdb or strace killed with SIGKILL is detached by
  the kernel (the target is back in ``S``: measured; :func:`note_target` covers a stop left behind).
- The guardian's front is a POSIX shell (``/bin/sh``, its notes read by ``cat``): 1-2 ms of CPU
  where ``python -I -S`` cost 12-30 ms, plus its scan of every environment at the end, on every
  run. When rankscope exits normally with nothing left (every child it started was a leaf, a
  py-spy dump, and was reaped; no target or path noted), it writes ``end`` last and the front
  exits without starting Python: on a hung 16-rank job (2 cores, idle) a plain ``stacks`` took
  0.844x the manual pipeline's wall against 0.888x with the Python guardian, 15 ms less CPU per
  run. Otherwise (a child that may leave descendants: torchrun, gcore, ssh; a note still open; a
  SIGKILL) the front runs the Python guardian with every note, which does what is described
  below. A long run (``watch``) hands over to the Python guardian after :data:`LIGHT_NOTES` bytes
  of notes, since the front keeps them all. rankscope waits for neither to be ready: the notes
  and the end of file wait in the pipe.

The fan-out (rankscope.cluster.fanout) builds its pidfd loop on :func:`start`'s :class:`Child`;
its remote command runs under a watcher that kills it when the connection drops
(:func:`rankscope.cluster.transports.remote_script`).

Shared module: stdlib, ``procfs`` and ``guardian`` only.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time

from rankscope import guardian as _guardian_program
from rankscope import procfs

#: typing and collections.abc cost milliseconds; a plain `stacks` imports this before its first dump.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterable, Iterator, Mapping
    from typing import Any, Optional

#: Set in every child's environment: ``<run id>:<serial>``; inherited by whatever the child starts.
STARTED_BY = _guardian_program.STARTED_BY
#: After SIGTERM, how long a group gets to end before SIGKILL.
TERM_GRACE = 1.0

_serial = itertools.count(1)
_run: Optional[tuple[int, str]] = None


def run_id() -> str:
    """This rankscope process's id: ``<pid>.<random>`` (a new one after fork; no reused pid matches it)."""
    global _run
    if _run is None or _run[0] != os.getpid():
        _run = (os.getpid(), f"{os.getpid()}.{os.urandom(4).hex()}")
    return _run[1]


def new_token() -> str:
    """A fresh :data:`STARTED_BY` value for one child."""
    return f"{run_id()}:{next(_serial)}"


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group ``pgid``; False when it is gone (or not ours)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


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


# --- the guardian: what rankscope started dies with it, SIGKILL included ----------------------

_BOOTSTRAP = "import sys; p = sys.argv[1]; sys.argv = sys.argv[1:]; exec(compile(open(p).read(), p, 'exec'))"
#: The guardian's front (arguments: the interpreter, the bootstrap, the program, run id, grace):
#: its notes until end of file; ``end`` last means nothing is left to do; otherwise the Python
#: guardian gets every note. Where ``cat`` cannot run, the Python guardian reads the pipe itself.
_FRONT = """trap '' INT HUP PIPE
if notes=$(cat); then
  case $notes in end|*'
end') exit 0 ;; esac
  exec "$1" -I -S -c "$2" "$3" "$4" "$5" <<NOTES
$notes
NOTES
fi
exec "$1" -I -S -c "$2" "$3" "$4" "$5"
"""
#: Bytes of notes after which a light front hands over to the Python guardian (it keeps every note).
LIGHT_NOTES = 32 * 1024
_SHELL = "/bin/sh"


class Guardian:
    """The guardian process of this rankscope process (:mod:`rankscope.guardian`), and the notes it holds.

    Started by :func:`guardian` on first use; started again (with every note) when it is gone.
    """

    def __init__(self) -> None:
        import _thread

        self._lock = _thread.allocate_lock()
        self._owner = 0
        self._write = -1
        self.pid = 0
        self._targets: dict[int, str] = {}
        self._paths: set[str] = set()
        #: Bytes of notes the light front holds (None: the Python guardian runs, or none).
        self._light: Optional[int] = None
        #: Leaf children (they start nothing) not reaped yet; whether any other kind was started.
        self._leaves = 0
        self._wide = False
        self._ended = False

    def ensure(self) -> None:
        with self._lock:
            if self._owner != os.getpid():  # first use, or a forked child: its own guardian
                self._targets, self._paths = {}, set()
                self._leaves, self._wide, self._ended = 0, False, False
                self._spawn(light=True)
                import atexit

                atexit.register(self._at_exit)

    def started(self, leaf: bool) -> None:
        """A child is about to start: a leaf (counted until :meth:`reaped`) or one that may leave
        descendants (then the Python guardian's scan is needed at the end)."""
        with self._lock:
            if leaf:
                self._leaves += 1
            else:
                self._wide = True
            if self._ended:  # a child after the end mark: the mark no longer holds
                self._ended = False
                self._send("go\n")

    def reaped(self) -> None:
        with self._lock:
            self._leaves = max(0, self._leaves - 1)

    def _at_exit(self) -> None:
        """At a normal exit: ``end`` last when nothing is left for the guardian to do."""
        with self._lock:
            if self._owner != os.getpid() or self._light is None:
                return
            if self._wide or self._leaves or self._targets or self._paths:
                return
            self._send("end\n")
            self._ended = True

    def _spawn(self, light: bool) -> None:
        import sys

        read, write = os.pipe()
        program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guardian.py")
        python = sys.executable
        argv = [python, "-I", "-S", "-c", _BOOTSTRAP, program, run_id(), str(TERM_GRACE)]
        path = python
        if light and python and os.access(python, os.X_OK) and os.access(_SHELL, os.X_OK):
            argv = [_SHELL, "-c", _FRONT, "rankscope-guardian", python, *argv[4:]]
            path = _SHELL
        else:
            light = False
        actions = [
            (os.POSIX_SPAWN_DUP2, read, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ]
        self._owner = os.getpid()
        try:
            self.pid = os.posix_spawn(path, argv, {}, file_actions=actions, setsid=True)
        except OSError:  # no interpreter to run it (an embedded one): children still end with rankscope
            os.close(write)  # by group and token, only not after a SIGKILL
            self.pid, self._write, self._light = 0, -1, None
            return
        finally:
            os.close(read)
        self._write = write
        self._light = 0 if light else None
        notes = [f"T {pid} {state}" for pid, state in self._targets.items()]
        notes += [f"P {os.fsencode(path).hex()}" for path in self._paths]
        if notes:
            self._send("\n".join(notes) + "\n")

    def _send(self, text: str) -> None:
        if self._write < 0:
            return
        data = text.encode()
        try:
            os.write(self._write, data)
        except OSError:  # the guardian is gone (someone killed it): a new one, with every note
            os.close(self._write)
            self._spawn(light=self._light is not None)
            return
        if self._light is not None:
            self._light += len(data)
            if self._light > LIGHT_NOTES:  # the front keeps every note: the Python guardian takes over
                front = self._write
                self._spawn(light=False)
                with contextlib.suppress(OSError):
                    os.write(front, b"end\n")  # the new guardian covers the run: the front just exits
                os.close(front)

    def note(self, text: str, update: Any) -> None:
        self.ensure()
        with self._lock:
            update()
            self._send(text + "\n")


_GUARDIAN = Guardian()


def guardian(leaf: bool = False) -> Guardian:
    """This process's guardian, started if it is not yet (before the first child it protects).

    ``leaf``: the child about to start starts nothing itself (a py-spy dump) and is reported by
    :func:`leaf_reaped` once reaped; then the guardian needs no scan if rankscope ends normally.
    """
    _GUARDIAN.ensure()
    _GUARDIAN.started(leaf)
    return _GUARDIAN


def leaf_reaped() -> None:
    """A child started after ``guardian(leaf=True)`` was reaped."""
    _GUARDIAN.reaped()


def note_target(pid: int, state: str) -> None:
    """``pid`` is being worked on (traced, dumped); ``state`` its state letter before: the guardian
    continues it if rankscope dies and leaves it stopped."""
    _GUARDIAN.note(f"T {pid} {state or '?'}", lambda: _GUARDIAN._targets.__setitem__(pid, state))


def release_target(pid: int, resume: bool = True) -> bool:
    """Done with ``pid``: continued if it is stopped now and was not before (True then); with
    ``resume`` False the caller checks that itself (rankscope.stacks.pstate)."""
    continued = resume and _guardian_program.continue_if_stopped(pid, _GUARDIAN._targets.get(pid, "?"))
    _GUARDIAN.note(f"t {pid}", lambda: _GUARDIAN._targets.pop(pid, None))
    return continued


def note_path(path: str) -> None:
    """``path`` (a file or a private directory rankscope made) is removed if rankscope dies first."""
    _GUARDIAN.note(f"P {os.fsencode(path).hex()}", lambda: _GUARDIAN._paths.add(path))


def release_path(path: str) -> None:
    _GUARDIAN.note(f"p {os.fsencode(path).hex()}", lambda: _GUARDIAN._paths.discard(path))


@contextlib.contextmanager
def private_tempdir(prefix: str, parent: Optional[str] = None) -> Iterator[str]:
    """A fresh 0700 directory (in ``parent``, else the temporary directory), removed at the end of
    the block, on SIGTERM or Ctrl-C (the block's exception), and by the guardian when rankscope dies
    first."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    note_path(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        release_path(path)


# --- SIGTERM as an exception -----------------------------------------------------------------


class Terminated(KeyboardInterrupt):
    """SIGTERM to rankscope, raised where it was running (:func:`sigterm_raises`); exit 143."""

    signum = signal.SIGTERM


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread for as long as the block runs, once:
    a second SIGTERM while the block cleans up is ignored (the guardian is there if it never ends)."""

    def terminated(_signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- one child: deadline, its own group, bounded output, reaped once, its tree ended -------------


class Capture:
    """Output kept up to ``limit`` bytes: the head, and the last :data:`TAIL` bytes once it is over."""

    TAIL = 64 << 10

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._head = bytearray()
        self._tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = max(0, self.limit - self.TAIL - len(self._head))
        self._head += data[:room]
        self._tail += data[room:]
        if len(self._tail) > self.TAIL:
            cut = len(self._tail) - self.TAIL
            self.dropped += cut
            del self._tail[:cut]

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def bytes(self) -> bytes:
        if not self.dropped:
            return bytes(self._head + self._tail)
        return bytes(self._head) + f"\n[... {self.dropped} bytes cut ...]\n".encode() + bytes(self._tail)

    def text(self) -> str:
        return self.bytes().decode("utf-8", "replace")


#: Captured output is kept up to this many bytes per child unless the caller says otherwise.
OUTPUT_LIMIT = 16 << 20


class Child:
    """One process rankscope started for its own work (:func:`start`), with everything it starts."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        token: str,
        timeout: Optional[float],
        capture: Optional[Capture],
        grace: float = TERM_GRACE,
    ) -> None:
        self.process = process
        #: Seconds between SIGTERM and SIGKILL when the tree is ended.
        self.grace = grace
        self.token = token
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self.output = capture
        self.timed_out = False
        self._reaped = False
        self._ended: Optional[float] = None
        import _thread

        self._lock = _thread.allocate_lock()
        _LIVE.add(self)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> Optional[int]:
        """The exit code once reaped (negative: the signal that ended it); None before."""
        return self.process.returncode if self._reaped else None

    @property
    def elapsed(self) -> float:
        """Seconds from its start to its reaping (or to now while it runs)."""
        return (self._ended or time.monotonic()) - self.started

    def text(self) -> str:
        return self.output.text() if self.output is not None else ""

    def exited(self) -> bool:
        """Has the child itself exited? (it is not reaped yet: its pid, and group, stay reserved)."""
        if self._reaped:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def reap(self) -> int:
        """Reap the child (once; later calls return the same code). What its group left runs no
        further: it is SIGKILLed before the pid is released, so no reused pid is ever signalled."""
        with self._lock:
            if not self._reaped:
                signal_group(self.pid, signal.SIGKILL)
                self._drain()
                self.process.wait()
                self._reaped, self._ended = True, time.monotonic()
                if self.output is not None and self.process.stdout is not None:
                    self.process.stdout.close()  # all read: the descriptor goes with the child
                _LIVE.discard(self)
        return self.process.returncode

    def end(self, grace: Optional[float] = None) -> int:
        """End the whole tree: SIGTERM to the child's group and to every process carrying its token,
        SIGKILL after ``grace`` (default: :attr:`grace`) to what is left; the child is reaped.
        Returns its exit code."""
        grace = self.grace if grace is None else grace
        with self._lock:
            if not self._reaped:
                signal_group(self.pid, signal.SIGTERM)
                _guardian_program.signal_carriers(self.token, signal.SIGTERM)
                until = time.monotonic() + grace
                while time.monotonic() < until and (
                    not self.exited() or _guardian_program.carriers(self.token)
                ):
                    self._drain()  # a child blocked on a full pipe still ends
                    time.sleep(0.02)
                _guardian_program.end_carriers(self.token, 0.0)
        return self.reap()

    def _drain(self) -> None:
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None and self.output is not None:
                _read_available(stream.fileno(), self.output)

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.exited():
            self.reap()
        else:
            self.end()


#: Children started and not reaped yet (:func:`end_all`).
_LIVE: set[Child] = set()


def end_all() -> None:
    """End every child still running (each with its tree): what a caller whose children run in
    worker threads does when SIGTERM or Ctrl-C reaches the main thread."""
    for child in list(_LIVE):
        child.end()


def _read_available(fd: int, capture: Capture) -> bool:
    """Read what ``fd`` has now into ``capture``; False at end of file."""
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        capture.add(data)


def start(
    argv: list[str],
    timeout: Optional[float] = None,
    *,
    env: Optional[Mapping[str, str]] = None,
    session: bool = True,
    capture: Optional[int] = OUTPUT_LIMIT,
    umask: int = -1,
    grace: float = TERM_GRACE,
    mark: bool = True,
    **popen: Any,
) -> Child:
    """Start ``argv`` for rankscope's own work: it, and what it starts, die with rankscope.

    ``timeout``: seconds until :func:`wait` ends it (None: no deadline). ``session``: a session of
    its own (no controlling terminal), else only a process group. ``capture``: stdout (and stderr,
    unless ``stderr`` is passed) kept up to that many bytes (None: pass ``stdout``/``stderr``).
    ``umask``: the child's (0o077 for a tool that writes private files, gcore). ``grace``: seconds
    from SIGTERM to SIGKILL when its tree is ended (a launcher forwards SIGTERM). The guardian is
    started first, so the child is covered from its first instruction. ``mark`` False: the child is
    the user's program run in the foreground (``prefix``, ``rerun``), not rankscope's work: no
    :data:`STARTED_BY` and no guardian; its group is still ended by :meth:`Child.end` and
    :meth:`Child.reap`. stdin is /dev/null unless ``stdin`` is passed (the fan-out's transports get
    a pipe rankscope holds open and never writes: its end of file tells a remote watcher).
    """
    import subprocess  # not at import time: `stacks` on one node needs only StopSignals from here

    if mark:
        guardian()
    if capture is not None:
        popen["stdout"] = subprocess.PIPE
        popen.setdefault("stderr", subprocess.STDOUT)
    popen.setdefault("stdin", subprocess.DEVNULL)
    token = new_token()
    child_env = dict(os.environ if env is None else env)
    if mark:
        child_env[STARTED_BY] = token
    if session:
        popen["start_new_session"] = True
    else:
        popen["preexec_fn"] = os.setpgrp  # before any thread starts: prefix starts its child first
    process = subprocess.Popen(argv, env=child_env, umask=umask, **popen)
    output = None
    if capture is not None:
        output = Capture(capture)
        assert process.stdout is not None
        os.set_blocking(process.stdout.fileno(), False)
    return Child(process, token, timeout, output, grace)


def wait(children: list[Child], stop_fd: int = -1) -> bool:
    """Read the children's output until each has exited (reaped) or passed its deadline (ended, with
    ``timed_out``). True when ``stop_fd`` (:attr:`StopSignals.fd`) became readable first: the caller
    ends what still runs (:meth:`Child.end`)."""
    import selectors

    with selectors.DefaultSelector() as selector:
        for child in children:
            if child.output is not None and child.process.stdout is not None:
                selector.register(child.process.stdout.fileno(), selectors.EVENT_READ, child)
        if stop_fd >= 0:
            selector.register(stop_fd, selectors.EVENT_READ, None)
        running = [c for c in children if c.returncode is None]
        while running:
            now = time.monotonic()
            for child in running:
                late = child.deadline is not None and now >= child.deadline and not child.exited()
                if late or child.exited():
                    stdout = child.process.stdout
                    fd = stdout.fileno() if stdout is not None and not stdout.closed else -1
                    if fd >= 0 and fd in selector.get_map():
                        selector.unregister(fd)  # before the descriptor is closed with the child
                    child.timed_out = late
                    if late:
                        child.end()
                    else:
                        child.reap()
            running = [c for c in running if c.returncode is None]
            deadlines = [c.deadline for c in running if c.deadline is not None]
            pause = min([0.05, *(d - now for d in deadlines)])
            for key, _ in selector.select(max(0.0, pause)):
                if key.data is None:
                    return True
                if not _read_available(key.fd, key.data.output):
                    selector.unregister(key.fd)
    return False


def run(argv: list[str], timeout: float, stop_fd: int = -1, **options: Any) -> Child:
    """:func:`start` and :func:`wait` for one child; it is ended (its tree too) on a stop as well."""
    child = start(argv, timeout, **options)
    with child:
        if wait([child], stop_fd):
            child.end()
    return child


def output(argv: list[str], timeout: float) -> Optional[str]:
    """``argv``'s stdout (stderr dropped) when it exits 0 within ``timeout``; None when it is missing,
    fails or runs too long (its tree ended then): the "ask a tool, within a deadline" of every room."""
    import subprocess

    try:
        child = run(argv, timeout, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    return child.text() if child.returncode == 0 and not child.timed_out else None


def kill_tree(process: subprocess.Popen[bytes], grace: float = 5.0, known: Iterable[int] = ()) -> None:
    """SIGTERM a launcher rankscope did not start through :func:`start` (torchrun forwards it),
    then SIGKILL it and the group of every descendant, listed before anything is killed: torchrun
    and mpirun start their workers outside their own group, and once the launcher is gone those
    workers are orphans that neither its group nor its list of children reaches any more."""
    import subprocess

    table = procfs.table()
    children: dict[int, list[int]] = {}
    for entry in table.values():
        children.setdefault(entry.ppid, []).append(entry.pid)
    pids, stack = set(known), list(children.get(process.pid, []))
    while stack:
        pid = stack.pop()
        pids.add(pid)
        stack.extend(children.get(pid, []))
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
    for pid in [process.pid, *sorted(pids)]:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace)


def tool_path(name: str) -> Optional[str]:
    """The tool ``name`` next to this interpreter (a venv's bin/, where pip puts py-spy and pystack,
    found even when the venv was not activated), else on PATH; None when neither has it."""
    import sys

    beside = os.path.join(os.path.dirname(sys.executable), name)
    if os.access(beside, os.X_OK):
        return beside
    import shutil

    return shutil.which(name)


# --- the one child that outlives rankscope ----------------------------------------------------


def start_detached(
    argv: list[str], env: Optional[Mapping[str, str]] = None, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start the user's job for a watcher: **detached**, the one kind of child that outlives rankscope.

    A session of its own, stdin /dev/null, and no :data:`STARTED_BY` of this run (one it inherited
    from this rankscope is removed; one from an outer rankscope that started this one is kept, and
    that rankscope's promise holds). Nothing here or in the guardian ends it:
    the caller may wait for it, and never kills it on its own way out.
    """
    import subprocess

    job_env = dict(os.environ if env is None else env)
    if job_env.get(STARTED_BY, "").startswith(f"{run_id()}:"):
        del job_env[STARTED_BY]
    popen.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.Popen(argv, env=job_env, start_new_session=True, **popen)


def process_started() -> Optional[float]:
    """When this process started, as a time.monotonic() instant (from /proc's start time); ``None`` if
    /proc does not say. Commands count their own start-up with it."""
    after_boot = procfs.started_after_boot()
    if after_boot is None:
        return None
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - after_boot
    return time.monotonic() - age if age >= 0 else None
