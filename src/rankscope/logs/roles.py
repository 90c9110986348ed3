"""What part an error played: the root cause, a consequence of another rank's failure, or caught.

- ``victim``: the error says a peer went away or never answered (gloo ``Connection closed by
  peer``, NCCL remote errors, watchdog and socket timeouts, a signal from the launcher, the
  launcher's own ``ChildFailedError``). Such a rank died *because* another one did.
- ``handled``: the rank kept writing normal output after the traceback (see
  :data:`rankscope.logs.tracebacks.HANDLED_LINES`): the exception was caught and logged.
- ``culprit``: anything else; a candidate for the root cause.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Optional

from rankscope.logs.tracebacks import FrameLine, RankTraceback
from rankscope.model import Words


class Role(Words):
    CULPRIT = "culprit"
    VICTIM = "victim"
    HANDLED = "handled"


#: Messages of errors that a rank gets when another rank (or the launcher) failed first.
VICTIM_MESSAGES = re.compile(
    "|".join(
        (
            # gloo (transport/tcp/pair.cc) and torch's TCPStore
            r"Connection closed by peer",
            r"Connection reset by peer",
            r"\bRead error\b",
            r"\bWrite error\b",
            r"Broken pipe",
            r"Timed out waiting \d+ms for (?:recv|send) operation",
            r"Connection was likely closed",
            r"failed to recv, got 0 bytes",
            r"Socket Timeout",
            # the store: a key another rank was to write never came (gloo's peer addresses, a barrier's key)
            r"\bwait timeout after \d+ ?ms, keys:",
            # NCCL through ProcessGroupNCCL
            r"ncclRemoteError",
            r"remote process exit",
            r"NCCL communicator was aborted",
            r"Watchdog caught collective operation timeout",
            r"watchdog thread terminated",
            r"ProcessGroupNCCL is (?:aborted|shut ?down)",
            # monitored_barrier on the ranks that arrived and lost rank 0 (it names the culprits)
            r"successfully reached monitoredBarrier",
            # the launcher or the scheduler stopped the process
            r"got signal: \d+",
            r"^KeyboardInterrupt\b",  # SIGINT, from Ctrl-C or from the launcher passing it on
            r"\bSignalException\b",
            r"\bChildFailedError\b",
            # torchrun's agent on a node whose rendezvous another node's agent closed (that node's
            # job failed, or it used up its restarts): the cause is in the other node's log
            r"\bRendezvousClosedError\b",
            # torch.multiprocessing.spawn in the parent: the child's own traceback follows it
            # ("-- Process 2 terminated with the following error:"), or its death by a signal
            r"\bProcess(?:Raised|Exited)Exception\b",
            # vLLM's engine after a worker died or failed to start: its own errors are consequences
            r"\bEngineDeadError\b",
            r"Engine core initialization failed",
            r"WorkerProc initialization failed",
            r"^RuntimeError: cancelled$",
            # vLLM's executor restating a worker's error (the worker's own traceback is above it):
            # "Worker failed with error '...', please check the stack trace above for the root cause"
            r"Worker failed with error\b.*stack trace above for the root cause",
            # Ray's driver (or another actor) calling an actor whose worker process died: the cause is
            # that worker's own output (a crash, an abort), not this call
            r"\bActorDiedError\b",
            # accelerate's test runner (execute_subprocess_async) reporting the launch it ran failed
            r"' failed with returncode -?\d+$",
            # accelerate (and other launchers built on subprocess) reporting a child that died
            r"\bCalledProcessError\b.*(?:died with <Signals|returned non-zero exit status)",
            # torch.multiprocessing.spawn's own: a process it started died (its error follows, or its signal)
            r"\bProcessRaisedException\b",
            r"\bProcessExitedException\b",
            # torch.distributed.checkpoint on every rank after a rank's save or load step failed:
            # that rank's traceback follows under "(RANK n)" (rankscope.logs.tracebacks)
            r"\bCheckpointException ranks:",
            # torch < 1.8 raised a plain Exception for it: "Exception: process 2 terminated with signal SIGKILL"
            r"^Exception: process \d+ terminated with (?:signal SIG[A-Z]+|exit code \d+)",
        )
    ),
    re.IGNORECASE,
)


#: torch's words for NCCL's ``ncclSystemError`` (torch 1.x to 2.x): a local system error or, as
#: often, a peer that died; a victim where another rank's error explains it (:func:`maybe_victim`).
PEER_MAYBE_GONE = re.compile(r"unexpected exit of a remote peer")


def nccl_error_line(text: str) -> bool:
    """torch >= 2.0's ``DistBackendError: ...``, or torch < 2.0's ``RuntimeError: NCCL error in: ...``:
    their reason is on the lines after the exception line (NCCL's ``Last error:``, torch's words)."""
    kind, _, message = text.partition(":")
    return kind.endswith("DistBackendError") or (
        kind.endswith("RuntimeError") and message.lstrip().startswith("NCCL error")
    )


def _nccl_error(tb: RankTraceback) -> bool:
    return nccl_error_line(tb.exception)


def is_victim(tb: RankTraceback) -> bool:
    """Does the error say that a peer, the network or the launcher ended this rank?"""
    if VICTIM_MESSAGES.search(tb.exception):
        return True
    return _nccl_error(tb) and any(VICTIM_MESSAGES.search(line) for line in tb.tail)


#: torchrun's agent and its c10d rendezvous store: the store runs in the agent of the node at
#: ``--rdzv-endpoint`` (c10d_rendezvous_backend.py); ``_create_tcp_store`` is the connect at the
#: start, ``_call_store`` a store operation of the running agent (its heartbeat, ``num_nodes_waiting``).
RDZV_CONNECTION = "RendezvousConnectionError"


def lost_store(tb: RankTraceback) -> bool:
    """torchrun's agent losing its c10d rendezvous store mid-run (a store operation of the running
    agent failed: the store's node ended), not failing to reach it at the start."""
    functions = {frame.function for frame in tb.frames}
    return (
        RDZV_CONNECTION in tb.exception
        and "_call_store" in functions
        and "_create_tcp_store" not in functions
    )


def maybe_victim(tb: RankTraceback) -> bool:
    """An NCCL error that may be a peer's death (torch's ``ncclSystemError`` words), or torchrun's
    agent losing its rendezvous store mid-run (the store's node ended, maybe for its own ranks'
    failure): a victim when another rank's error in the same log is a culprit, else the culprit itself."""
    if lost_store(tb):
        return True
    return _nccl_error(tb) and any(PEER_MAYBE_GONE.search(line) for line in [tb.exception, *tb.tail])


def role_of(tb: RankTraceback) -> Role:
    if tb.handled or tb.ignored:
        return Role.HANDLED
    return Role.VICTIM if is_victim(tb) else Role.CULPRIT


_STDLIB = re.compile(r"/lib/python\d\.\d+/")
_NOT_USER = ("/site-packages/", "/dist-packages/", "/torch/", "<frozen ")
#: The console scripts of launchers (``.../bin/torchrun``: ``sys.exit(main())``): installed code.
_LAUNCHER_SCRIPT = re.compile(r"/bin/(?:torchrun|accelerate|deepspeed|ds|lightning|ray|vllm|mpirun)$")


def is_user_frame(frame: FrameLine) -> bool:
    """Code the job's authors wrote: not torch, not an installed package or launcher script, not the
    standard library."""
    name = frame.filename
    return (
        not any(part in name for part in _NOT_USER)
        and not _STDLIB.search(name)
        and not _LAUNCHER_SCRIPT.search(name)
    )


def user_frame(frames: Iterable[FrameLine]) -> Optional[FrameLine]:
    """The innermost frame of the user's own code, if any."""
    found = None
    for frame in frames:
        if is_user_frame(frame):
            found = frame
    return found


_PACKAGE = ("/site-packages/", "/dist-packages/")


def where_frame(frames: Iterable[FrameLine]) -> Optional[FrameLine]:
    """Where an error was raised, for its reader: the innermost frame of the user's own code, else
    the innermost frame of an installed package other than torch (vLLM's, DeepSpeed's, flashinfer's:
    the code the user runs, where every frame is a library's); None for torch's and the launchers'
    own errors (torchrun's ``RendezvousTimeoutError``)."""
    frames = list(frames)
    found = user_frame(frames)
    if found is not None:
        return found
    for frame in reversed(frames):
        name = frame.filename
        if (
            any(part in name for part in _PACKAGE)
            and "/torch/" not in name
            and not _LAUNCHER_SCRIPT.search(name)
        ):
            return frame
    return None
