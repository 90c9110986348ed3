"""The events of ``trace export`` as a timeline section: one row per rank, calls as bars (pure).

:class:`TimelineBuilder` is fed the trace events one at a time, as ``trace export`` writes them,
and keeps a bounded picture of them: the :data:`MAX_SLICES` longest calls that ended (a heap, so
memory does not grow with the rings), every call still open at the end of a ring (drawn to that
end and marked), at most :data:`MAX_DEPTH` nesting levels per thread and the last
:data:`MAX_STEPS` progress steps per rank; what is left out is counted in the section's notes.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rankscope.pictures.page import Page, TimelineRow, TimelineSection, TimelineSlice, TimelineStep

if TYPE_CHECKING:
    from rankscope.trace.export_write import ExportResult

#: Calls that ended drawn in all (the longest); the open ones are drawn besides.
MAX_SLICES = 3000
#: Nesting levels drawn per thread (the outermost).
MAX_DEPTH = 12
#: Progress steps drawn per rank (the last).
MAX_STEPS = 400


@dataclass
class _Open:
    name: str
    where: str
    start: float
    before: bool


@dataclass
class _Rank:
    label: str
    #: thread id of the export -> name
    threads: dict[int, str] = field(default_factory=dict)
    stacks: dict[int, list[_Open]] = field(default_factory=dict)
    steps: deque[TimelineStep] = field(default_factory=lambda: deque(maxlen=MAX_STEPS))
    first: float = -1.0
    last: float = 0.0
    clock: str = ""


@dataclass
class TimelineBuilder:
    """Trace events in (``FileExport.events``), a :class:`TimelineSection` out."""

    max_slices: int = MAX_SLICES
    ranks: dict[int, _Rank] = field(default_factory=dict)
    #: (duration, order, pid, tid, depth, slice) of the longest calls that ended
    kept: list[tuple[float, int, int, int, int, TimelineSlice]] = field(default_factory=list)
    seen: int = 0
    too_deep: int = 0
    steps_seen: int = 0

    def rank(self, pid: int, label: str) -> None:
        """Name the row of process ``pid`` (``host:rank``) before its events."""
        self.ranks[pid] = _Rank(label)

    def clock(self, pid: int, words: str) -> None:
        if pid in self.ranks:
            self.ranks[pid].clock = words

    def feed(self, event: dict[str, Any]) -> None:
        row = self.ranks.get(event.get("pid", 0))
        if row is None:
            return
        ph = event.get("ph")
        if ph == "M":
            if event.get("name") == "thread_name":
                row.threads[event["tid"]] = str(event["args"]["name"])
            return
        ts = float(event["ts"])
        if row.first < 0:
            row.first = ts
        row.last = max(row.last, ts)
        tid = event.get("tid", 0)
        if ph == "B":
            args = event.get("args", {})
            where = f"{str(args.get('file', '')).rsplit('/', 1)[-1]}:{args.get('line', '')}"
            row.stacks.setdefault(tid, []).append(
                _Open(event["name"], where, ts, bool(args.get("open_before")))
            )
        elif ph == "E":
            stack = row.stacks.get(tid)
            if stack:
                call = stack.pop()
                self._ended(event["pid"], tid, len(stack), call, ts)
        elif ph == "i" and event.get("cat") == "progress":
            self.steps_seen += 1
            row.steps.append(TimelineStep(ts, int(event["args"]["step"])))

    def _ended(self, pid: int, tid: int, depth: int, call: _Open, end: float) -> None:
        self.seen += 1
        if depth >= MAX_DEPTH:
            self.too_deep += 1
            return
        drawn = TimelineSlice(call.name, call.where, call.start, end, depth, before=call.before)
        item = (end - call.start, self.seen, pid, tid, depth, drawn)
        if len(self.kept) < self.max_slices:
            heapq.heappush(self.kept, item)
        else:
            heapq.heappushpop(self.kept, item)

    def section(self, notes: Sequence[str] = ()) -> TimelineSection:
        per_rank: dict[int, list[tuple[int, int, TimelineSlice]]] = {pid: [] for pid in self.ranks}
        for _, _, pid, tid, depth, drawn in self.kept:
            per_rank[pid].append((tid, depth, drawn))
        open_calls = open_deep = 0
        for pid, row in self.ranks.items():
            for tid, stack in row.stacks.items():
                for depth, call in enumerate(stack):
                    open_calls += 1
                    if depth >= MAX_DEPTH:
                        open_deep += 1
                        continue
                    drawn = TimelineSlice(
                        call.name, call.where, call.start, row.last, depth, True, call.before
                    )
                    per_rank[pid].append((tid, depth, drawn))
        rows = [self._row(row, per_rank[pid]) for pid, row in self.ranks.items()]
        starts = [row.first for row in self.ranks.values() if row.first >= 0]
        said = list(notes)
        ended = len(self.kept)
        if self.seen > ended:
            said.append(
                f"{ended} of {self.seen} calls that ended are drawn (the longest); "
                f"{self.seen - ended} left out"
                + (f", {self.too_deep} of them nested deeper than {MAX_DEPTH}" if self.too_deep else "")
            )
        if open_calls:
            said.append(
                f"{open_calls} calls still open at the end of their ring, drawn to that end (marked ⟶)"
                + (f"; {open_deep} nested deeper than {MAX_DEPTH} left out" if open_deep else "")
            )
        shown_steps = sum(len(row.steps) for row in self.ranks.values())
        if self.steps_seen > shown_steps:
            said.append(
                f"the last {MAX_STEPS} progress steps per rank are drawn, {self.steps_seen - shown_steps} left out"
            )
        return TimelineSection(
            title="Timeline: calls per rank on the wall clock",
            rows=rows,
            start=min(starts) if starts else 0.0,
            end=max((row.last for row in self.ranks.values()), default=0.0),
            notes=said,
        )

    def _row(self, row: _Rank, slices: list[tuple[int, int, TimelineSlice]]) -> TimelineRow:
        depths: dict[int, int] = {}
        for tid, depth, _ in slices:
            depths[tid] = max(depths.get(tid, 0), depth + 1)
        first: dict[int, int] = {}
        lanes = 0
        for tid in sorted(depths):
            first[tid] = lanes
            lanes += depths[tid]
        drawn = []
        for tid, depth, item in sorted(slices, key=lambda s: (s[2].start, s[1])):
            item.lane = first[tid] + depth
            drawn.append(item)
        threads = [(first[tid], row.threads.get(tid, f"thread {tid}")) for tid in sorted(depths)]
        return TimelineRow(row.label, threads, lanes, drawn, list(row.steps), row.last, row.clock)


def export_page(result: ExportResult, timeline: TimelineBuilder, target: str) -> Page:
    """The page of ``trace export --html``: what was exported, then the timeline."""
    notes = [
        f"clock of {s.host} {s.ms:+.3f} ms vs {s.reference} (median of {s.samples} collective returns); "
        "each row is drawn on its own host's clock"
        for s in result.skew
    ]
    hosts = {row.label.rsplit(":", 1)[0] for row in timeline.ranks.values()}
    if len(hosts) > 1 and not result.skew:
        notes.append(
            "the hosts' clocks could not be compared (no collective returns in common: trace with "
            "--include torch.distributed); each row is drawn on its own host's clock"
        )
    verdict = [
        f"{result.files} trace files, {result.open_calls} calls still open at the end of their ring",
        f"the same events as {result.out} (open it in Perfetto for every call and sample)",
    ]
    page = Page(title="rankscope trace export", subtitle=f"trace files under {target}", verdict=verdict)
    page.sections.append(timeline.section(notes))
    page.notes = [f"unreadable: {u.path}: {u.reason}" for u in result.unreadable]
    return page
