"""A strict checker of Chrome trace-event JSON (the JSON object format), as Perfetto and
chrome://tracing read it: the keys each phase requires, their types, one thread's times never going
back, every E closing a B of its thread. What is left open is returned for the test to judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: keys every event of a phase must carry
REQUIRED = {
    "B": ("name", "ts", "pid", "tid"),
    "E": ("ts", "pid", "tid"),
    "X": ("name", "ts", "dur", "pid", "tid"),
    "i": ("name", "ts", "pid", "tid", "s"),
    "M": ("name", "pid", "args"),
}
#: metadata events and the argument each one names
METADATA = {
    "process_name": "name",
    "process_sort_index": "sort_index",
    "process_labels": "labels",
    "thread_name": "name",
    "thread_sort_index": "sort_index",
}


@dataclass
class Checked:
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    #: per (pid, tid): the B events never closed, outermost first
    open: dict[tuple[int, int], list[dict[str, Any]]] = field(default_factory=dict)
    #: per (pid, tid): its B, E, X and i events in order
    ordered: dict[tuple[int, int], list[dict[str, Any]]] = field(default_factory=dict)


def check_trace_events(doc: Any) -> Checked:
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), "not a trace-event object"
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns")
    out = Checked()
    last: dict[tuple[int, int], float] = {}
    for event in doc["traceEvents"]:
        assert isinstance(event, dict), event
        ph = event.get("ph")
        assert ph in REQUIRED, f"unknown phase: {event}"
        missing = [key for key in REQUIRED[ph] if key not in event]
        assert not missing, f"{ph} event without {missing}: {event}"
        assert isinstance(event["pid"], int) and not isinstance(event["pid"], bool), event
        if "tid" in event:
            assert isinstance(event["tid"], int) and not isinstance(event["tid"], bool), event
        if "args" in event:
            assert isinstance(event["args"], dict), event
        if ph == "M":
            key = METADATA.get(event["name"])
            assert key is not None and key in event["args"], f"unknown or empty metadata: {event}"
            if event["name"].startswith("thread_"):
                assert "tid" in event, event
            if event["name"] == "process_name":
                out.process_names[event["pid"]] = event["args"]["name"]
            elif event["name"] == "thread_name":
                out.thread_names[event["pid"], event["tid"]] = event["args"]["name"]
            continue
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0, event
        if ph in ("B", "X", "i"):
            assert isinstance(event["name"], str) and event["name"], event
        if ph == "i":
            assert event["s"] in ("g", "p", "t"), event
        if ph == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0, event
        track = (event["pid"], event["tid"])
        assert event["ts"] >= last.get(track, 0.0), f"time goes back on {track}: {event}"
        last[track] = event["ts"]
        out.ordered.setdefault(track, []).append(event)
        stack = out.open.setdefault(track, [])
        if ph == "B":
            stack.append(event)
        elif ph == "E":
            assert stack, f"an E with no open B on {track}: {event}"
            stack.pop()
    for pid, tid in out.ordered:
        assert pid in out.process_names, f"process {pid} has no process_name"
        assert (pid, tid) in out.thread_names, f"thread {pid}/{tid} has no thread_name"
    out.open = {track: stack for track, stack in out.open.items() if stack}
    return out
