"""torchrun's restarts of its workers in one source, counted as its blocks are read (pure).

torchrun restarts the workers after a failure while ``--max-restarts`` allows. Two lines tell it:

- its agent's ``[default] Worker group FAILED. 2/3 attempts left; will restart worker group``
  (``... will restart worker group`` when nodes join too), logged at INFO: printed by torch < 2.2's
  default logging, hidden by later ones unless ``LOGLEVEL=INFO``;
- its agent's ``failed (exitcode: 1) local_rank: 1 (pid: 24482) of binary: ...``, logged as an error
  once per failed attempt (seen with torch 2.13 and ``--max-restarts 1``: two such lines from the same
  agent pid, the first one's attempt restarted). One agent line alone is no restart; the lines of
  several agents (several nodes' output in one file) are told apart by the agent's pid, so a source
  whose lines carry none counts the first kind only.

An attempt is the number of restarts before a position; :attr:`Attempts.restarts` how many there
were in the source, and :attr:`Attempts.last_restart_line` the line of the last one.
"""

from __future__ import annotations

import bisect
import re
import time
from typing import Callable, Optional

#: torchrun's agent restarting the workers: the same prefixes then belong to new processes.
RESTART_MARKER = b"will restart worker group"
#: torchrun's agent reporting a failed attempt: ``E1127 06:09:33.670000 24476 torch/distributed/
#: elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 24482) of binary``.
FAILED_MARKER = b"] failed (exitcode: "
#: The head torch's logger writes before it (glog's): level, month and day, local time, the pid.
_AGENT_PID = re.compile(
    rb"[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.\d+)? +(\d+) torch/distributed/elastic/[\w/]+\.py:\d+$"
)


class Attempts:
    """The restarts of one source: feed every block, then ask where each position falls."""

    def __init__(self) -> None:
        self._markers: list[int] = []  # lines of "will restart worker group"
        self._failures: dict[bytes, list[int]] = {}  # an agent's pid -> lines of its failed attempts
        self._bounds: list[int] = []  # positions in the block being read where an attempt ends
        self._after: list[int] = []  # the attempt that starts at each of them
        self._current = 0  # the attempt at the start of the block being read

    def feed(self, chunk: bytes, line_of: Callable[[int], int]) -> None:
        """Read one block (``line_of``: a position's 1-based line number in the source)."""
        self._current = self._at_end()
        self._bounds, self._after = [], []
        for pos, agent, _ in _restart_lines(chunk):
            line = line_of(pos)
            if agent:
                self._failures.setdefault(agent, []).append(line)
            else:
                self._markers.append(line)
            self._bounds.append(pos)
            self._after.append(self._at_end())

    def at(self, pos: int) -> int:
        """The attempt at ``pos`` of the block last fed; provisional: an agent's last failed-attempt
        line ends no attempt, so it is settled against :attr:`restarts` once the source is read."""
        index = bisect.bisect_right(self._bounds, pos)
        return self._after[index - 1] if index else self._current

    def _at_end(self) -> int:
        failed = max((len(lines) for lines in self._failures.values()), default=0)
        return max(len(self._markers), failed)

    @property
    def restarts(self) -> int:
        """How many times the workers were restarted in the source (so far)."""
        failed = max((len(lines) for lines in self._failures.values()), default=0)
        return max(len(self._markers), failed - 1)

    @property
    def last_restart_line(self) -> int:
        """The line of the last restart (0 without one): a marker, or an agent's failed attempt that
        another of its failed attempts followed."""
        lines = [*self._markers, *(line for each in self._failures.values() for line in each[:-1])]
        return max(lines, default=0)


def _restart_lines(chunk: bytes) -> list[tuple[int, bytes, Optional[re.Match[bytes]]]]:
    """Where ``chunk``'s lines that end an attempt are, in order: (position, the agent's pid and its
    logger's head for a failed-attempt line; b"" and None for a restart line)."""
    found: list[tuple[int, bytes, Optional[re.Match[bytes]]]] = []
    pos = chunk.find(RESTART_MARKER)
    while pos >= 0:
        found.append((pos, b"", None))
        pos = chunk.find(RESTART_MARKER, pos + 1)
    pos = chunk.find(FAILED_MARKER)
    while pos >= 0:
        start = chunk.rfind(b"\n", 0, pos) + 1
        head = _AGENT_PID.search(chunk, start, pos)
        if head is not None:
            found.append((pos, head.group(6), head))
        pos = chunk.find(FAILED_MARKER, pos + 1)
    return sorted(found, key=lambda event: event[0])


def _when(head: re.Match[bytes], now: float) -> float:
    """The local time a logger's head gives (month, day, time; no year: the latest not after now)."""
    month, day, hour, minute, second = (int(head.group(i)) for i in range(1, 6))
    year = time.localtime(now).tm_year
    when = time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    if when > now + 86400:
        when = time.mktime((year - 1, month, day, hour, minute, second, 0, 0, -1))
    return when


def attempt_ends(chunk: bytes, started: Optional[float] = None, now: Optional[float] = None) -> list[int]:
    """The ends of the lines in ``chunk`` that close an attempt of a job that still runs: the restart
    line, and an agent's failed-attempt line written before ``started`` (when the running workers
    started, seconds since the epoch: a later one is the running attempt's own, written as torchrun
    tears it down)."""
    now = time.time() if now is None else now
    ends = []
    for pos, _, head in _restart_lines(chunk):
        if head is not None and started is not None and _when(head, now) >= started:
            continue
        end = chunk.find(b"\n", pos)
        ends.append(len(chunk) if end < 0 else end + 1)
    return ends
