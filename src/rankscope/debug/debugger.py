"""``rankscope.breakpoint()`` and ``rankscope.ForkedPdb``: pdb on one rank of a distributed job.

What plain ``pdb.set_trace()`` and ``torch.distributed.breakpoint()`` get wrong, and what this does:

- The rank stops in the caller's own frame, on the line after ``rankscope.breakpoint()``: no
  ``up`` first, and ``n`` steps through the caller's code while the other ranks keep waiting.
  They are released when the pdb session ends (``c``, ``q``, Ctrl-D, a remote client leaving),
  not when a helper function returns.
- ``q`` (and Ctrl-D) detaches: breakpoints are cleared, the rank goes on and the others are
  released. Plain pdb would raise ``BdbQuit`` in one rank and leave the others in a collective
  until it times out.
- The others wait for a flag (:mod:`rankscope.debug.rendezvous`), not in a collective
  with a timeout, so a long session does not end the job.
- pdb talks to the terminal device itself (:mod:`rankscope.debug.terminal`), or, with no terminal
  (srun, pdsh, a background launcher), to a Unix socket for its user and root (:mod:`rankscope.debug.remote`)
  that ``rankscope attach`` joins; the line to copy is written to file descriptor 2 directly, past
  any Python-level log filter.
- A failure to set any of this up never raises into the job: one line on stderr, and the rank
  goes on (releasing the others).

Imported inside training processes (lazily, on the first use of ``rankscope.breakpoint``):
Python 3.9, standard library only; torch only when the program imported it already.
"""

from __future__ import annotations

import code
import contextlib
import io
import os
import pdb
import socket
import sys

from rankscope.debug import remote, rendezvous, terminal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Callable, Optional, TextIO

#: The n-th call of every rank meets the n-th call of the others.
_calls = 0

#: pdb never stops in these modules when stepping out of the caller.
_SKIP = ["rankscope.debug", "rankscope.debug.*"]


def say(text: str) -> None:
    """One line to file descriptor 2, past sys.stderr and whatever wraps it (log filters, tee)."""
    with contextlib.suppress(OSError):
        os.write(2, f"rankscope: {text}\n".encode("utf-8", "replace"))


def _truthy(value: Optional[str]) -> Optional[bool]:
    if value is None or not value.strip():
        return None
    return value.strip().lower() not in ("0", "no", "false", "off")


class _Terminal:
    """pdb's streams on a terminal descriptor."""

    def __init__(self, fd: int) -> None:
        self.reader: TextIO = os.fdopen(os.dup(fd), "r", encoding="utf-8", errors="replace")
        self.writer: TextIO = os.fdopen(fd, "w", buffering=1, encoding="utf-8", errors="replace")

    def close(self, farewell: str = "") -> None:
        try:
            if farewell:
                self.writer.write(farewell)
            self.writer.close()
            self.reader.close()
        except OSError:
            pass


def open_session(
    remote_only: Optional[bool],
    host: Optional[str],
    port: Optional[int],
    who: str,
    on_listen: Optional[Callable[[str], None]] = None,
) -> Any:
    """A terminal, else a listening socket (announced on stderr, and to ``on_listen``); ``None``
    when neither can be had."""
    if remote_only is None:
        remote_only = bool(_truthy(os.environ.get("RANKSCOPE_BREAKPOINT_REMOTE")))
    if not remote_only:
        fd = terminal.open_terminal()
        if fd is not None:
            return _Terminal(fd)
    env_host, env_port = remote.listen_address()
    host = host or env_host
    port = env_port if port is None else port
    node = socket.gethostname()
    subject = (
        f"{who} on {node}" if who == f"process {os.getpid()}" else f"{who} (pid {os.getpid()} on {node})"
    )
    greeting = who if who == f"process {os.getpid()}" else f"{who} pid {os.getpid()}"
    server: remote.RemoteIO
    try:
        if host is None and port is None:
            server, _name = remote.serve_unix(greeting)
            how = f"attach on {node} with: rankscope attach --pid {os.getpid()}"
        else:
            host = host or "127.0.0.1"
            server, token = remote.serve_tcp(host, port or 0, greeting)
            try:
                token_file = remote.write_token_file(server, token)
            except OSError:
                server.close()
                raise
            how = (
                f"attach with: rankscope attach {remote.shown_host(host)}:{server.port} "
                f"--token-file {token_file} (a file on {node} that only you and root can read)"
            )
    except (OSError, ValueError, OverflowError) as exc:
        where = "a Unix socket" if host is None and port is None else f"{host}:{port or 0}"
        say(f"{who}: cannot stop in pdb: no terminal, and cannot listen on {where} ({exc})")
        return None
    line = f"{subject} is stopped in pdb with no terminal; {how}"
    say(line)
    if on_listen is not None:
        try:
            on_listen(line)
        except Exception as exc:
            say(f"{who}: cannot pass the attach line to the other ranks ({exc})")
    return server


class _LeaveConsole(SystemExit):
    """``exit()`` or ``quit()`` typed in pdb's ``interact``: back to pdb."""


def _leave_console(*args: Any) -> None:
    raise _LeaveConsole


class _Console(code.InteractiveConsole):
    """pdb's ``interact`` on the session's own streams (the terminal or the socket), not on the
    process's stdin and stdout, which belong to the launcher."""

    def __init__(self, debugger: pdb.Pdb, namespace: dict[str, Any]) -> None:
        super().__init__(namespace)
        self._debugger = debugger
        self.ended_by_eof = False

    def raw_input(self, prompt: str = "") -> str:
        self.write(prompt)
        line = self._debugger.stdin.readline()
        if not line:
            self.ended_by_eof = True
            raise EOFError
        return line.rstrip("\r\n")

    def write(self, data: str) -> None:
        self._debugger.stdout.write(data)
        self._debugger.stdout.flush()


class ForkedPdb(pdb.Pdb):
    """pdb for a process whose stdin is not the user's (a forked child, a launched worker).

    It talks to the user's terminal when there is one to use, else serves itself on a Unix socket for
    ``rankscope attach`` (the line to copy goes to stderr). ``q`` and Ctrl-D detach: breakpoints
    are cleared and the program goes on. ``on_release`` runs once, when the session ends
    (``c``, ``q``, Ctrl-D, the remote client leaving); ``on_listen`` gets the attach line.

    Usage: ``rankscope.ForkedPdb().set_trace()``.
    """

    def __init__(
        self,
        *,
        remote: Optional[bool] = None,
        host: Optional[str] = None,
        port: Optional[int] = None,
        who: str = "",
        on_release: Optional[Callable[[], None]] = None,
        on_listen: Optional[Callable[[str], None]] = None,
        **kwargs: Any,
    ) -> None:
        who = who or f"process {os.getpid()}"
        self._session = open_session(remote, host, port, who, on_listen)
        self._on_release = on_release
        kwargs.setdefault("nosigint", True)  # never touch the job's SIGINT handler
        kwargs.setdefault("skip", _SKIP)
        if self._session is not None:
            kwargs["stdin"] = self._session.reader if isinstance(self._session, _Terminal) else self._session
            kwargs["stdout"] = self._session.writer if isinstance(self._session, _Terminal) else self._session
        super().__init__(**kwargs)
        self.prompt = f"(Pdb {who}) " if who.startswith("rank") else "(Pdb) "

    @property
    def usable(self) -> bool:
        """Whether a terminal or a socket was had (else pdb would read this process's stdin)."""
        return self._session is not None

    def release(self) -> None:
        """Run ``on_release`` once (the other ranks go on)."""
        callback, self._on_release = self._on_release, None
        if callback is not None:
            callback()

    def set_continue(self) -> None:
        super().set_continue()
        self.release()
        if not self.breaks:  # nothing left to stop at: the session is over
            self._end_session("continuing\n")

    def _end_session(self, farewell: str) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close(farewell)
            # Whatever pdb still writes or reads after this goes nowhere, never to a closed file.
            self.stdout = io.StringIO()
            self.stdin = io.StringIO()

    def detach(self) -> bool:
        """Clear every breakpoint, stop tracing, let the program go on."""
        self.clear_all_breaks()
        self.set_continue()
        return True

    def do_interact(self, arg: str) -> Optional[bool]:
        """interact
        An interactive interpreter in the current frame's names, on this session's terminal or
        socket; exit() or Ctrl-D returns to pdb (over rankscope attach, Ctrl-D detaches)."""
        frame = self.curframe
        if frame is None:
            return None
        names: dict[str, Any] = {**frame.f_globals, **self.curframe_locals}
        names["exit"] = names["quit"] = _leave_console  # site's exit() would close the job's stdin
        console = _Console(self, names)
        # print() and the values shown reach the session, not the job's stdout.
        with contextlib.redirect_stdout(self.stdout), contextlib.suppress(_LeaveConsole):
            console.interact(banner="*interactive*: exit() returns to pdb", exitmsg="")
        if console.ended_by_eof and isinstance(self._session, remote.RemoteIO) and not self._session.attached:
            return self.detach()  # the client left: as Ctrl-D at pdb's prompt
        return None

    def do_quit(self, arg: str) -> bool:
        """q(uit) | exit
        Detach: clear the breakpoints and let the program go on (other ranks are released)."""
        self.message("detached; the program goes on")
        return self.detach()

    do_q = do_exit = do_quit

    def do_EOF(self, arg: str) -> bool:
        """EOF (Ctrl-D, or the remote client leaving): detach as ``q`` does."""
        self.message("")
        return self.detach()


def _rank_and_world() -> tuple[Optional[int], int, bool]:
    """(rank, world size, spans nodes) from the default group, else the launcher's environment."""
    from rankscope.ranks import rank_from_env, spans_nodes

    group = rendezvous.group_rank()
    if group is not None:
        return group[0], group[1], spans_nodes(os.environ)
    identity = rank_from_env(os.environ)
    world = identity.world_size
    if identity.rank is None:  # a world size without a rank: a process of a job that cannot tell which
        text = os.environ.get("WORLD_SIZE", "").strip()
        world = int(text) if text.isdigit() else None
    return identity.rank, world or 1, spans_nodes(os.environ)


def breakpoint(
    rank: int = 0,
    *,
    remote: Optional[bool] = None,
    host: Optional[str] = None,
    port: Optional[int] = None,
    timeout: Optional[float] = None,
    frame: Optional[FrameType] = None,
) -> None:
    """Stop rank ``rank`` in pdb, on the caller's next line; the other ranks wait until it goes on.

    Every rank must call it (the n-th call of each rank meets the n-th of the others).
    ``remote``: serve pdb on a socket even when a terminal is there (``RANKSCOPE_BREAKPOINT_REMOTE=1``).
    ``host``/``port``: listen on TCP there (``RANKSCOPE_BREAKPOINT_HOST``/``_PORT``) instead of a Unix socket.
    ``timeout``: seconds the other ranks wait at most (default: as long as the session lasts).
    ``RANKSCOPE_BREAKPOINT=0`` turns every call into a no-op.
    """
    global _calls
    if _truthy(os.environ.get("RANKSCOPE_BREAKPOINT")) is False:
        return
    _calls += 1
    caller = frame if frame is not None else sys._getframe(1)
    try:
        rank = int(rank)  # a rank read from the environment ("1") is meant as that number
    except (TypeError, ValueError):
        say(f"breakpoint: rank={rank!r} is not a rank number; nobody stops")
        return
    try:
        me, world, spans = _rank_and_world()
    except Exception as exc:  # never raise into the job
        say(f"breakpoint: cannot tell this process's rank ({exc}); stopping it alone")
        me, world, spans = None, 1, False
    if world > 1 and me is None:
        say(f"breakpoint: WORLD_SIZE={world} but no RANK says which process this is; nobody stops")
        return
    if world > 1 and not 0 <= rank < world:
        if me == 0:
            say(f"breakpoint: rank={rank} is not a rank of this job (world size {world}); nobody stops")
        return
    me_is_chosen = world <= 1 or me is None or me == rank
    flag: Optional[rendezvous.Flag] = None
    if world > 1 and me is not None:
        try:
            flag = rendezvous.flag_for(_calls, os.environ, spans)
            if flag is None and me_is_chosen:
                say(
                    "breakpoint: the job spans nodes and has no process group yet, nor torchrun's store: "
                    "ranks on other nodes will not wait (initialise the process group first, "
                    "or set RANKSCOPE_BREAKPOINT_DIR to a directory every node shares)"
                )
        except Exception as exc:
            say(
                f"breakpoint: rank {me}: cannot share a flag with the other ranks ({exc}); they will not wait"
            )
            flag = None
    if not me_is_chosen:
        if flag is not None:
            try:
                # Rank 0 repeats the stopped rank's attach line: a launcher that shows rank 0's
                # output alone (torchrun --local-ranks-filter=0) hides the stopped rank's own.
                relay = (lambda note: say(f"rank 0 waits; {note}")) if me == 0 else None
                if not flag.wait(timeout, relay, world):
                    say(f"breakpoint: rank {me}: gave up waiting for rank {rank} after {timeout} s")
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                say(f"breakpoint: rank {me}: stopped waiting for rank {rank} ({exc})")
        return
    _stop(caller, me, world, flag, remote, host, port)


def _stop(
    caller: FrameType,
    me: Optional[int],
    world: int,
    flag: Optional[rendezvous.Flag],
    remote_only: Optional[bool],
    host: Optional[str],
    port: Optional[int],
) -> None:
    def release() -> None:
        if flag is not None:
            try:
                flag.release(world)
            except Exception as exc:
                say(f"breakpoint: cannot release the other ranks ({exc}): they wait until their timeout")

    who = f"rank {me}" if me is not None else f"process {os.getpid()}"
    try:
        debugger = ForkedPdb(
            remote=remote_only,
            host=host,
            port=port,
            who=who,
            on_release=release,
            on_listen=flag.post if flag is not None else None,
        )
    except Exception as exc:
        say(f"breakpoint: {who}: cannot start pdb ({exc}); going on")
        release()
        return
    if not debugger.usable:
        release()
        return
    try:
        debugger.set_trace(caller)
    except Exception as exc:
        say(f"breakpoint: {who}: cannot start pdb ({exc}); going on")
        release()
