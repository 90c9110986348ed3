"""Run many short commands at once from one thread: posix_spawn, one poll loop.

`rankscope stacks` runs one py-spy per rank. With subprocess and a thread pool every dump
costs a thread, a Popen and a communicate() loop, and importing concurrent.futures and
subprocess alone takes longer than several dumps. Here each command is spawned with
os.posix_spawn, and a command past its deadline is killed. Only os, select and time are imported
here.

A command's standard output goes to an anonymous in-memory file (memfd_create), read once after
it exits; only its standard error is a pipe, read as it comes, whose end (POLLHUP) says that the
command exited. py-spy writes its JSON a line at a time: through a pipe a 16-rank run woke this
loop about 500 times for its 16 dumps (16 ms of its CPU under a profiler), now about twice a dump.
Where memfd_create is missing, standard output is a pipe as well.

Every command dies with rankscope (rankscope.lifetime): it carries this run's token in its
environment, the guardian is started before the first one, and the process it looks at is noted
so that the guardian continues it if rankscope is killed while a dump holds it stopped. Each is a
leaf (py-spy starts no process): once all are reaped and rankscope ends normally, the guardian's
shell front exits without the Python guardian's scan (rankscope.lifetime).
"""

from __future__ import annotations

import os
import select
import time

TYPE_CHECKING = False  # typing is too slow to import here
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_READ = select.POLLIN | select.POLLHUP | select.POLLERR
_CHUNK = 1 << 16


class Run:
    """One command: its process, output read so far, and how it ended."""

    __slots__ = (
        "argv",
        "child",
        "started",
        "deadline",
        "target",
        "state_before",
        "_fds",
        "_chunks",
        "_open",
        "_out_file",
        "_out",
        "returncode",
        "timed_out",
    )

    def __init__(
        self, argv: tuple[str, ...], child: int, fds: tuple[int, ...], timeout: float, out_file: int = -1
    ) -> None:
        self.argv = argv
        self.child = child
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        #: The process the command looks at (0: none) and its state letter just before it started.
        self.target = 0
        self.state_before = "?"
        #: The pipes read as output comes: (stdout, stderr), or (stderr,) when stdout is ``out_file``.
        self._fds = fds
        self._chunks: dict[int, list[bytes]] = {fd: [] for fd in fds}
        self._open = set(fds)
        self._out_file = out_file
        self._out = b""
        self.returncode: int | None = None
        self.timed_out = False

    @property
    def done(self) -> bool:
        return self.returncode is not None

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    @property
    def stdout(self) -> bytes:
        if self._out_file >= 0 or len(self._fds) == 1:
            return self._out
        return b"".join(self._chunks[self._fds[0]])

    @property
    def stderr(self) -> bytes:
        return b"".join(self._chunks[self._fds[-1]])

    def _take_output(self) -> None:
        """Read the in-memory standard output once the command is reaped, and close it."""
        if self._out_file < 0:
            return
        fd, self._out_file = self._out_file, -1
        try:
            size = os.fstat(fd).st_size
            chunks: list[bytes] = []
            offset = 0
            while offset < size:
                got = os.pread(fd, size - offset, offset)
                if not got:
                    break
                chunks.append(got)
                offset += len(got)
            self._out = b"".join(chunks)
        finally:
            os.close(fd)


def _memory_file() -> int:
    """A new anonymous in-memory file for a command's standard output (-1 where there is none)."""
    try:
        return os.memfd_create("rankscope-output", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return -1


class Runner:
    """Commands started with `spawn` and finished by `wait`; each is reaped exactly once."""

    def __init__(self, env: Mapping[str, str]) -> None:
        from rankscope import lifetime

        self._lifetime = lifetime
        self.env = {**env, lifetime.STARTED_BY: lifetime.new_token()}
        self.running: list[Run] = []
        self._poll = select.poll()
        self._owner: dict[int, Run] = {}

    def spawn(self, argv: Sequence[str], timeout: float, target: int = 0, state_before: str = "?") -> Run:
        """Start ``argv`` (stdin /dev/null, stdout and stderr captured); OSError if it cannot start.

        ``target``: the process it looks at, and ``state_before`` its state letter now.
        """
        self._lifetime.guardian(leaf=True)
        if target:
            self._lifetime.note_target(target, state_before)
        out_file = _memory_file()
        out_r, out_w = (-1, out_file) if out_file >= 0 else os.pipe()
        err_r, err_w = os.pipe()
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ]
        read = (err_r,) if out_file >= 0 else (out_r, err_r)
        try:
            child = os.posix_spawn(argv[0], list(argv), self.env, file_actions=actions)
        except OSError:
            for fd in (*read, out_file):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:
            if out_file < 0:
                os.close(out_w)
            os.close(err_w)
        run = Run(tuple(argv), child, read, timeout, out_file)
        run.target, run.state_before = target, state_before
        for fd in read:
            self._owner[fd] = run
            self._poll.register(fd, _READ)
        self.running.append(run)
        return run

    def _close(self, run: Run, fd: int) -> None:
        self._poll.unregister(fd)
        del self._owner[fd]
        os.close(fd)
        run._open.discard(fd)

    def _reap(self, run: Run) -> None:
        for fd in list(run._open):
            self._close(run, fd)
        _, status = os.waitpid(run.child, 0)
        self._lifetime.leaf_reaped()
        run.returncode = os.waitstatus_to_exitcode(status)
        run._take_output()
        self.running.remove(run)
        if run.target:
            self._lifetime.release_target(run.target, resume=False)  # the caller checks it running

    def kill(self, run: Run) -> None:
        """Stop a command now (SIGKILL) and reap it; it counts as timed out."""
        import contextlib
        import signal

        if run.done:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(run.child, signal.SIGKILL)
        run.timed_out = True
        self._reap(run)

    def wait(self, until: float | None = None, wake_fd: int = -1) -> list[Run]:
        """Read output until at least one command ends, ``until`` (monotonic) passes, or
        ``wake_fd`` becomes readable (a stop signal's pipe: the caller decides what to do).

        Returns the commands that ended (reaped), including those killed at their deadline.
        """
        finished: list[Run] = []
        if wake_fd >= 0:
            self._poll.register(wake_fd, select.POLLIN)
        try:
            self._wait(finished, until, wake_fd)
        finally:
            if wake_fd >= 0:
                self._poll.unregister(wake_fd)
        return finished

    def _wait(self, finished: list[Run], until: float | None, wake_fd: int) -> None:
        while self.running and not finished:
            now = time.monotonic()
            for run in [r for r in self.running if r.deadline <= now]:
                self.kill(run)
                finished.append(run)
            if finished or (until is not None and now >= until):
                break
            nearest = min(r.deadline for r in self.running)
            if until is not None:
                nearest = min(nearest, until)
            for fd, _ in self._poll.poll(max(0.0, nearest - now) * 1000 + 1):
                if fd == wake_fd:
                    return
                run = self._owner[fd]
                data = os.read(fd, _CHUNK)
                if data:
                    run._chunks[fd].append(data)
                    continue
                self._close(run, fd)
                if not run._open:  # both pipes closed: the command has exited
                    self._reap(run)
                    finished.append(run)

    def finish_all(self) -> list[Run]:
        """Wait for every running command (each under its own deadline)."""
        ended: list[Run] = []
        while self.running:
            ended += self.wait()
        return ended
