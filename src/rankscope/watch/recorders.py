"""The stall signal of a job with neither progress markers nor output files: its flight recorders.

Every :func:`cadence` seconds (a quarter of ``--stall``, between ``--interval`` and
:data:`MAX_PERIOD`) the watcher asks each rank's in-process handler (``RANKSCOPE_INPROC=1``) for
``fr_status`` (:mod:`rankscope.inproc.frstatus`): each process group's newest collective enqueued
and completed, a few numbers answered in microseconds of the rank's time, no dump written. Their
sum is the rank's one number; no rank's number changing for ``--stall`` seconds means no collective
was issued or finished anywhere: a stall, confirmed by stacks as the other signals are.

Asked only while the job gives nothing else to watch, and only of ranks whose handler lists
``fr_status``; a rank whose answer names no process group (torch.distributed not imported yet, the
recorder off) has no number; while such ranks answer, the job is not taken for one with nothing to
watch (the watcher's note about that is left out). No signal is sent, nothing is stopped.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from rankscope.model import RankId
from rankscope.stacks.collect import Target
from rankscope.stacks.inproc_request import POLL, REPLY_MAX, Handler, find_handler, read_reply, send_request
from rankscope.watch.collect import Watched

KIND = "fr_status"
#: The longest time between two asks, whatever --stall is: a stall is seen at most this late.
MAX_PERIOD = 15.0
#: How long one ask may wait for the ranks' answers (a rank whose handler cannot run keeps its number).
ANSWER_TIMEOUT = 1.0
#: The most late requests whose replies are still looked for (and removed) at later asks.
MAX_LATE = 64


def cadence(stall: float, interval: float) -> float:
    """Seconds between two asks: a quarter of the stall time, at least one look, at most MAX_PERIOD."""
    return max(interval, min(stall / 4, MAX_PERIOD))


def progress_number(result: Any) -> Optional[int]:
    """A rank's one number from its ``fr_status`` answer; None when it names no process group."""
    if not isinstance(result, dict) or not isinstance(result.get("groups"), dict):
        return None
    total, seen = 0, False
    for values in result["groups"].values():
        if isinstance(values, list):
            for value in values:
                if isinstance(value, int) and not isinstance(value, bool):
                    total, seen = total + value, True
    return total if seen else None


@dataclass
class RecorderLooks:
    """The ranks' recorder numbers, asked for every ``period`` seconds."""

    period: float
    #: pid -> its number at the last answer.
    numbers: dict[int, int] = field(default_factory=dict)
    next_ask: float = 0.0
    #: Some rank's handler answers ``fr_status`` (its recorder may have no process group yet): the
    #: job is not one with nothing to watch.
    answering: bool = False
    #: pid -> its handler, found once per worker.
    handlers: dict[int, Handler] = field(default_factory=dict)
    #: Requests answered after their deadline: their replies are removed at a later ask.
    late: list[tuple[Handler, str]] = field(default_factory=list)

    def look(self, now: float, workers: Iterable[Watched]) -> tuple[tuple[int, int], ...]:
        """(pid, number) of the live workers that have one, asking again when the period is over."""
        live = {worker.pid: worker for worker in workers}
        if now >= self.next_ask and live:
            self.next_ask = now + self.period
            self._ask(list(live.values()))
        return tuple(sorted((pid, n) for pid, n in self.numbers.items() if pid in live))

    def reset(self) -> None:
        """Nothing to ask while the job has another signal; asked at once when it has none again."""
        self.numbers.clear()
        self.next_ask = 0.0
        self.answering = False

    def _ask(self, workers: list[Watched]) -> None:
        """Ask every worker's handler at once, then read the answers until :data:`ANSWER_TIMEOUT`."""
        for pid in [pid for pid in self.handlers if pid not in {w.pid for w in workers}]:
            del self.handlers[pid]  # exited
        self.late = [item for item in self.late[-MAX_LATE:] if read_reply(*item, REPLY_MAX) is None]
        deadline = time.monotonic() + ANSWER_TIMEOUT
        waiting: dict[int, tuple[Handler, str]] = {}
        for worker in workers:
            handler = self._handler(worker)
            if handler is None:
                continue
            ident = secrets.token_hex(8)
            if send_request(handler, KIND, ident, {}, deadline):
                waiting[worker.pid] = (handler, ident)
            else:  # its request thread is gone, or its files were replaced: found again next time
                self.handlers.pop(worker.pid, None)
        while waiting:
            for pid, (handler, ident) in list(waiting.items()):
                reply = read_reply(handler, ident, REPLY_MAX)
                if reply is None:
                    continue
                del waiting[pid]
                if not reply.get("ok"):
                    continue
                self.answering = True
                number = progress_number(reply.get("result"))
                if number is None:
                    self.numbers.pop(pid, None)  # answered: no process group (any more)
                else:
                    self.numbers[pid] = number
            if not waiting or time.monotonic() >= deadline:
                break  # a rank whose handler cannot answer now keeps its last number
            time.sleep(POLL)
        self.late += waiting.values()

    def _handler(self, worker: Watched) -> Optional[Handler]:
        """The worker's handler, found once (its description read, its start time checked) while it
        lives; None when it runs none that answers ``fr_status`` (looked for again at each ask)."""
        handler = self.handlers.get(worker.pid)
        if handler is None:
            target = Target(worker.pid, RankId(worker.host, worker.rank))
            handler, _ = find_handler(target, worker.host, for_stacks=False)
            if handler is None or KIND not in handler.kinds:
                return None
            self.handlers[worker.pid] = handler
        return handler
