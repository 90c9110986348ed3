"""Trace files as Chrome trace-event JSON (Perfetto, chrome://tracing): pure, one event at a time.

Each file is read twice, a chunk at a time (decode.py): the first pass finds, for every thread, the
calls that were already open at the file's oldest record (returns with no call before them, and
the open calls of the end that no call in the file opened), the second writes the events:

- one process track per file (``process_name``: rank and host), one thread track per thread
  (``thread_name``), sorted by rank;
- every call a slice, ``B`` at the call and ``E`` at its return; the calls open at the oldest
  record begin there (``args.open_before``), the calls still open at the end have no ``E``
  (Perfetto draws them to the end and says "did not end");
- ``rankscope.progress`` steps as process-wide instant events (``i``, ``s: p``), samples as
  thread instant events with their stack in ``args``;
- times in microseconds of wall-clock time since the earliest file's start (each file's own
  wall clock, read with its monotonic clock when tracing started): ranks of several hosts are
  aligned as their clocks are.

Clock skew between hosts: a collective (``all_reduce``, ``barrier``...) returns on every rank at
nearly the same moment, so where the files recorded the same collectives' returns
(``--include torch.distributed``), the median difference of those returns between two hosts is
their clock skew, within the collective's own spread (milliseconds on a loaded node).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

from rankscope.trace.decode import Event, TraceData
from rankscope.trace.stacks import Frame, StackBuilder

#: Functions whose returns line up across ranks (torch.distributed's collectives).
COLLECTIVES = frozenset(
    (
        "all_reduce",
        "barrier",
        "broadcast",
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_gather_single",  # torch 2.13's, which FSDP2 calls
        "reduce_scatter_single",
        "all_to_all",
        "all_to_all_single",
        "reduce",
        "gather",
        "scatter",
        "monitored_barrier",
    )
)
#: Collective returns kept per file for the clock skew (the last ones).
SKEW_RETURNS = 64
#: Calls open before a file's oldest record, kept per thread.
OPEN_MAX = 1024


@dataclass
class Opened:
    """What the first pass found in one file."""

    #: per thread: the calls open at the oldest record, outermost first
    before: dict[int, list[Frame]] = field(default_factory=dict)
    #: threads in order of their first event
    threads: list[int] = field(default_factory=list)
    #: thread names, from the whole stacks
    names: dict[int, str] = field(default_factory=dict)


def opened_before(events: Iterable[Event]) -> Opened:
    """First pass: per thread, the calls open at the oldest record."""
    builder = StackBuilder()
    called: dict[int, list[Frame]] = {}
    unmatched: dict[int, list[Frame]] = {}
    found = Opened()
    for event in events:
        thread = event.thread
        if thread not in called and event.kind not in ("lap", "lap end", "start", "stop"):
            called[thread], unmatched[thread] = [], []
            found.threads.append(thread)
        builder.feed(event)
        if event.kind == "stack" and event.name != "?":
            found.names[thread] = event.name
        if event.kind == "call":
            called[thread].append((event.file, event.line, event.name))
        elif event.kind in ("return", "unwind"):
            stack = called[thread]
            at = _find(stack, event)
            if at is not None:
                del stack[at:]
            elif not stack and len(unmatched[thread]) < OPEN_MAX:
                unmatched[thread].append((event.file, event.line, event.name))
    for thread in found.threads:
        end = builder.stacks.get(thread, [])
        still = len(called[thread])
        bottom = end[: len(end) - still] if len(end) >= still else []
        before = bottom + unmatched[thread][::-1]
        if before:
            found.before[thread] = before[-OPEN_MAX:]
    return found


def _find(stack: list[Frame], event: Event) -> Optional[int]:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i][2] == event.name and stack[i][0] == event.file:
            return i
    return None


def process_label(trace: TraceData) -> str:
    if trace.rank is None:
        return f"{trace.host} pid {trace.pid}"
    return f"rank {trace.rank} ({trace.host}, pid {trace.pid})"


@dataclass
class FileExport:
    """The second pass over one file: its trace events, and what the skew needs of it."""

    trace: TraceData
    pid: int
    #: microseconds between the export's zero and this file's monotonic zero
    offset_us: float
    opened: Opened
    #: (name, wall-clock µs) of the last collective returns
    collectives: deque[tuple[str, float]] = field(default_factory=lambda: deque(maxlen=SKEW_RETURNS))
    #: calls still open at the end, per thread id of the export
    still_open: dict[int, int] = field(default_factory=dict)

    def events(self, events: Iterable[Event]) -> Iterator[dict[str, Any]]:
        pid, trace = self.pid, self.trace
        main = trace.meta.get("thread")
        order = [main] if main in self.opened.threads else []
        order += [t for t in self.opened.threads if t != main]
        tids = {thread: i + 1 for i, thread in enumerate(order)}
        yield _meta("process_name", pid, None, {"name": process_label(trace)})
        rank = trace.rank
        yield _meta("process_sort_index", pid, None, {"sort_index": rank if rank is not None else 1 << 30})
        for thread, tid in tids.items():
            name = self.opened.names.get(thread) or f"thread {thread:#x}"
            if thread == main:
                name += " (started tracing)"
            yield _meta("thread_name", pid, tid, {"name": name})
            yield _meta("thread_sort_index", pid, tid, {"sort_index": tid})
        stacks: dict[int, list[Frame]] = {}
        last: dict[int, float] = {}
        began = False
        for event in events:
            ts = round(self.offset_us + event.t * 1e6, 3)
            if not began:  # the calls already open at the oldest record begin with it
                began = True
                for thread, frames in self.opened.before.items():
                    tid = tids[thread]
                    stacks[tid] = list(frames)
                    last[tid] = ts
                    for file, line, name in frames:
                        yield _slice(
                            "B", name, pid, tid, ts, {"file": file, "line": line, "open_before": True}
                        )
            tid = tids.get(event.thread, 0)
            if not tid:
                continue  # a mark of a thread with no events of its own
            ts = max(ts, last.get(tid, ts))  # one thread's times never go back (a torn record)
            last[tid] = ts
            kind = event.kind
            stack = stacks.setdefault(tid, [])
            if kind == "call":
                stack.append((event.file, event.line, event.name))
                yield _slice("B", event.name, pid, tid, ts, {"file": event.file, "line": event.line})
            elif kind in ("return", "unwind"):
                at = _find(stack, event)
                if at is None:
                    continue
                while len(stack) > at:
                    stack.pop()
                    yield {"ph": "E", "ts": ts, "pid": pid, "tid": tid}
                if event.name in COLLECTIVES:
                    self.collectives.append((event.name, ts))
            elif kind == "progress":
                step = int(event.name.split()[-1])
                yield {"name": event.name, "cat": "progress", "ph": "i", "s": "p", "ts": ts, "pid": pid,
                       "tid": tid, "args": {"step": step}}  # fmt: skip
            elif kind == "sample":
                where = [f"{f.rsplit('/', 1)[-1]}:{ln} {nm}" for f, ln, nm in event.stack]
                yield {"name": event.name, "cat": "sample", "ph": "i", "s": "t", "ts": ts, "pid": pid,
                       "tid": tid, "args": {"stack": where}}  # fmt: skip
            elif kind in ("start", "stop"):
                yield {
                    "name": event.name,
                    "cat": "trace",
                    "ph": "i",
                    "s": "p",
                    "ts": ts,
                    "pid": pid,
                    "tid": tid,
                }
        self.still_open = {tid: len(stack) for tid, stack in stacks.items() if stack}


def _meta(name: str, pid: int, tid: Optional[int], args: dict[str, Any]) -> dict[str, Any]:
    event: dict[str, Any] = {"name": name, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _slice(ph: str, name: str, pid: int, tid: int, ts: float, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "cat": "call", "ph": ph, "ts": ts, "pid": pid, "tid": tid, "args": args}


@dataclass(frozen=True)
class Skew:
    host: str
    reference: str
    #: this host's clock minus the reference host's, in milliseconds
    ms: float
    #: collective returns it was measured from
    samples: int


def clock_skew(files: list[FileExport]) -> list[Skew]:
    """Per host after the first: its clock skew against the first host, where both recorded the
    same last collectives (their names, matched from the end); hosts with none in common are left out."""
    hosts: dict[str, list[FileExport]] = {}
    for item in files:
        hosts.setdefault(item.trace.host, []).append(item)
    if len(hosts) < 2:
        return []
    names = list(hosts)
    reference = names[0]
    out = []
    for host in names[1:]:
        diffs = [
            theirs - ours
            for a in hosts[reference]
            for b in hosts[host]
            for ours, theirs in _matched(list(a.collectives), list(b.collectives))
        ]
        if diffs:
            out.append(Skew(host, reference, round(statistics.median(diffs) / 1000, 3), len(diffs)))
    return out


def _matched(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> list[tuple[float, float]]:
    """The times of the same collectives in two files: the longest common run of names at their ends."""
    pairs = []
    for (name_a, ts_a), (name_b, ts_b) in zip(reversed(a), reversed(b)):
        if name_a != name_b:
            break
        pairs.append((ts_a, ts_b))
    return pairs
