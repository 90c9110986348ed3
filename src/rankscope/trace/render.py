"""Text for a person (pure)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from rankscope.trace.analyse import GrepReport, TailReport, depths, event_text
from rankscope.trace.decode import Event, TraceData
from rankscope.trace.stacks import StackBuilder


def _event_line(event: Event, indent: int = 0) -> str:
    return f"{event.t:+12.6f}s  [{event.thread & 0xFFFFFF:06x}]  {'  ' * indent}{event_text(event)}"


def render_tail(report: TailReport) -> str:
    """Per group: the open calls its processes share (innermost last), then the last events of one."""
    lines = []
    for group in report.groups:
        lines.append(
            f"{group.ranks} {group.where}  ({len(group.files)} process{'es' if len(group.files) != 1 else ''})"
        )
        first = group.files[0]
        if group.stack:
            lost = "; partial: the outer calls were overwritten in the ring" if group.partial else ""
            lines.append(f"    open calls (innermost last{lost}):")
            lines.extend(f"        {call.location}" for call in group.stack)
        elif group.partial and first.last is not None:
            lines.append("    open calls: not known (overwritten in the ring)")
        if first.last is not None and first.last.kind != "stop":
            lines.append(f"    last event: {first.last.kind} {first.last.location}")
        if first.events:
            lines.append(f"    last events of {os.path.basename(first.path)}:")
            lines.extend("    " + _event_line(event) for event in first.events)
    for bad in report.unreadable:
        lines.append(f"unreadable: {bad.path}: {bad.reason}")
    return "\n".join(lines) + "\n"


def render_grep(report: GrepReport) -> str:
    lines = []
    for item in report.files:
        lines.append(f"{os.path.basename(item.path)}: {item.count}")
        for event in item.matches:
            lines.append("    " + _event_line(event))
    lines.append(
        f"{report.total} matches of {report.pattern!r} in {sum(1 for f in report.files if f.count)} of {len(report.files)} files"
    )
    for bad in report.unreadable:
        lines.append(f"unreadable: {bad.path}: {bad.reason}")
    return "\n".join(lines) + "\n"


def show_lines(trace: TraceData, events: Iterable[Event]) -> Iterator[str]:
    """``trace show``: a head line, then every event (indented by call depth) as it is decoded."""
    meta = trace.meta
    mode = "ring" if trace.ring else "full"
    yield (
        f"# {os.path.basename(trace.path)}: host {trace.host} rank {trace.rank} pid {trace.pid}, "
        f"python {meta.get('python')}, hook {meta.get('hook')}, {mode}"
        + (f" of {trace.capacity} records (wrapped {trace.wraps}x)" if trace.ring else "")
        + f", {trace.records} records"
    )
    builder = StackBuilder()
    for event, level in depths(events):
        builder.feed(event)
        yield _event_line(event, level)
        if event.kind in ("sample", "stack"):
            for file, line, name in event.stack if event.kind == "stack" else event.stack[:-1]:
                yield f"{'':32}{os.path.basename(file)}:{line} {name}"
    thread = trace.meta.get("thread")
    found = builder.stack(thread) if isinstance(thread, int) and not builder.stopped else None
    if found is not None and found.calls:
        lost = "; partial: the outer calls were overwritten in the ring" if found.partial else ""
        yield f"# open calls of the thread that started tracing (innermost last{lost}):"
        yield from (f"#     {call.location}" for call in found.calls)
