"""What the watcher saw at one look, and what it decided."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from rankscope.model import Words


class Reason(Words):
    """Why a capture was taken."""

    #: Progress markers (or, without them, the job's output files, or without those its flight
    #: recorders) stopped for --stall seconds.
    STALL = "stall"
    #: A rank fell --straggler-steps behind the most advanced one.
    STRAGGLER = "straggler"
    #: A rank exited with an error while others lived.
    DEATH = "death"
    #: The job ended with an error: the in-process handler's dumps of its teardown are kept.
    END = "end"
    #: SIGUSR1 to the watcher: a capture asked for (a scheduler's warning before the time limit).
    REQUEST = "request"


@dataclass(frozen=True)
class RankSample:
    """One worker at one look."""

    pid: int
    rank: Optional[int]
    #: The progress marker's call count (None: the rank records none).
    calls: Optional[int] = None
    step: Optional[int] = None
    #: Its marker was read before and is gone now, the process still there: the marker is removed
    #: only by the rank's own normal exit (atexit), so the rank is ending, not stalled (torch's
    #: teardown after it may take seconds on a loaded machine).
    ending: bool = False


@dataclass(frozen=True)
class Exit:
    """A worker that exited since the last look."""

    pid: int
    rank: Optional[int]
    #: Its exit status as the kernel keeps it for the parent: >= 0 an exit code, < 0 the signal;
    #: None when it could not be read (its parent reaped it first).
    code: Optional[int]
    #: Its progress marker was left behind (no normal interpreter exit removed it).
    marker_left: bool = False
    #: Its in-process handler dumped its stacks on a SIGTERM (``<base>.term``): something stopped it.
    term_dump: bool = False

    @property
    def failed(self) -> bool:
        return (self.code is not None and self.code != 0) or (self.code is None and self.marker_left)

    @property
    def stopped(self) -> bool:
        """Ended by a SIGTERM (a launcher's teardown, a scheduler), not by a failure of its own."""
        return self.code == -15 or self.term_dump

    def describe(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"
        if self.code is None:
            return f"{who} (pid {self.pid}) died"
        if self.code < 0:
            return f"{who} (pid {self.pid}) was killed by signal {-self.code}"
        return f"{who} (pid {self.pid}) exited with code {self.code}"


@dataclass(frozen=True)
class Snapshot:
    """One look at the job: monotonic time, live workers, exits since the last look, output files."""

    now: float
    ranks: tuple[RankSample, ...] = ()
    exits: tuple[Exit, ...] = ()
    #: (path, size, mtime) of each output file of the job.
    outputs: tuple[tuple[str, int, float], ...] = ()
    #: (pid, number) of each rank whose flight recorder was read (rankscope.watch.recorders): asked
    #: only while the job has neither markers nor output files.
    recorders: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Trigger:
    """A reason to capture, with what the watcher knows about it."""

    reason: Reason
    text: str
    #: The ranks it is about (the straggler, the rank that died); empty for a whole-job stall.
    ranks: tuple[int, ...] = ()
    #: For a stall: what went quiet ("progress markers", "output files" or "flight recorders").
    signal: str = ""


@dataclass
class WatchOptions:
    """What the command line asks of the watcher."""

    stall: float = 60.0
    straggler_steps: int = 20
    interval: float = 1.0
    max_captures: int = 10
    #: "watch" (go on) or "kill" (SIGTERM the job after a stall capture).
    then: str = "watch"
    capture_timeout: float = 60.0
    #: Seconds between rescans of the process table for the job's workers while it runs.
    rescan: float = 10.0
    confirm: bool = True
    notes: list[str] = field(default_factory=list)
