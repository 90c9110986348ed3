"""The tracer inside real processes: filters, threads, nesting, the ring, SIGKILL (3.11 and >= 3.12)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.trace.conftest import SRC, run_program

from rankscope.trace import format as fmt
from rankscope.trace.analyse import file_tail, where
from rankscope.trace.decode import BytesSource, Event, TraceData, decode, iter_events, read_layout
from rankscope.trace.render import show_lines


def _read(path: str) -> TraceData:
    return decode(path, Path(path).read_bytes())


def _names(trace: TraceData, kind: str = "call") -> list[str]:
    return [e.name for e in trace.events if e.kind == kind]


FILTERS = """
import json, sys, threading
sys.path.insert(0, sys.argv[1])
import helper  # the user's own module in another directory: traced
import rankscope.trace as rt

def worker():
    helper.in_helper()

def main():
    json.dumps({"a": [1, 2]})          # the standard library: not traced
    t = threading.Thread(target=worker)
    t.start()
    t.join()

path = rt.start(out="traces")
main()
rt.stop()
main()                                 # after stop: not traced
with rt.region(out="traces", include=["json"]) as second:
    json.dumps({"b": 1}, indent=1)     # --include json: traced
print(path)
print(second)
"""


def test_filters_threads_and_regions(python: str, hot_path: str, tmp_path: Path) -> None:
    helpers = tmp_path / "lib"
    helpers.mkdir()
    (helpers / "helper.py").write_text("def in_helper():\n    return 1\n")
    proc = run_program(python, FILTERS, tmp_path, str(helpers))
    assert proc.returncode == 0, proc.stderr
    first, second = (_read(p) for p in proc.stdout.split())
    calls = _names(first)
    assert calls.count("main") == 1 and "worker" in calls and "in_helper" in calls
    assert not [e for e in first.events if "json" in e.file or "threading" in e.file or "rankscope" in e.file]
    # the thread's events carry its own ident, not the main thread's
    main_thread = next(e.thread for e in first.events if e.name == "main")
    assert {e.thread for e in first.events if e.name == "worker"} - {main_thread}
    assert _names(first, "return").count("main") == 1
    # the region with include=["json"] sees json's own functions
    assert any("json" in e.file and e.kind == "call" for e in second.events)
    assert second.meta["include"] == ["json"]
    assert second.events[0].kind == "start" and second.events[-1].kind == "stop"
    # the cheapest hook of each version (docs/trace.md); the python fixture has made sure that the
    # C extension is importable in the "c" case, so a silent fall back to pure Python fails here
    version = tuple(int(v) for v in first.meta["python"].split(".")[:2])
    expected = {
        (True, "c"): "monitoring (C)",
        (True, "pure"): "monitoring",
        (False, "c"): "setprofile (C)",
        (False, "pure"): "settrace",
    }
    assert first.meta["hook"] == expected[version >= (3, 12), hot_path]


NESTED = """
import rankscope.trace as rt

def inner(): pass
def between(): pass
def after(): pass

outer = rt.start(out="traces")
again = rt.start(out="elsewhere")     # nested: the same file, options ignored
inner()
rt.stop()                             # ends the nested start only
assert rt.active_path() == outer
between()
rt.stop()
assert rt.active_path() is None
after()
rt.stop()                             # one stop too many: nothing happens
print(outer, again)
"""


def test_nested_start_and_stop(python: str, tmp_path: Path) -> None:
    proc = run_program(python, NESTED, tmp_path)
    assert proc.returncode == 0, proc.stderr
    outer, again = proc.stdout.split()
    assert outer == again and not (tmp_path / "elsewhere").exists()
    calls = _names(_read(outer))
    assert "inner" in calls and "between" in calls and "after" not in calls


RING = """
import rankscope.trace as rt

def a0(): pass
def a1(): pass
def a2(): pass
def a3(): pass
def a4(): pass

path = rt.start(out="traces", ring_records=64)
for _ in range(500):
    a0(); a1(); a2(); a3(); a4()
rt.stop()
print(path)
"""


def test_a_full_ring_keeps_the_last_records_in_order(python: str, tmp_path: Path) -> None:
    proc = run_program(python, RING, tmp_path)
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip()
    trace = _read(path)
    assert trace.ring and trace.capacity == 64 and trace.wraps > 10
    assert trace.records == 64
    # the size never grew past header + names + ring
    assert os.path.getsize(path) == fmt.HEADER_SIZE + fmt.DEFAULT_NAMES_BYTES + 64 * fmt.RECORD_BYTES
    events = [e for e in trace.events if e.kind in ("call", "return")]
    assert trace.events[-1].kind == "stop"
    times = [e.t for e in trace.events]
    assert times == sorted(times)
    # calls follow a0..a4 cyclically with no gap, each followed by its return
    calls = [e.name for e in events if e.kind == "call"]
    order = ["a0", "a1", "a2", "a3", "a4"]
    start = order.index(calls[0])
    assert calls == [order[(start + i) % 5] for i in range(len(calls))]
    assert len(calls) >= 24  # a lap's whole stacks take a few of the 64 slots
    # trace tail decodes only the newest records: the same last events
    newest = decode(path, Path(path).read_bytes(), last=3).events
    assert newest == trace.events[-len(newest) :] and 3 <= len(newest) < len(trace.events)


FULL = """
import rankscope.trace as rt

def f(): pass

path = rt.start(out="traces", full=True)
for _ in range(100000):
    f()
rt.stop()
print(path)
"""


def test_full_mode_keeps_every_event(python: str, tmp_path: Path) -> None:
    proc = run_program(python, FULL, tmp_path)
    assert proc.returncode == 0, proc.stderr
    trace = _read(proc.stdout.strip())
    assert not trace.ring
    assert _names(trace).count("f") == 100000 and _names(trace, "return").count("f") == 100000


SPIN = """
import sys
import rankscope.trace as rt

def warm(): pass

def spin():
    print("spinning", flush=True)
    x = 0
    while True:
        x += 1

rt.start(out="traces", calls=sys.argv[1] == "calls", sample_ms=5 if sys.argv[1] == "sample" else None)
for _ in range(1000):
    warm()
spin()
"""


@pytest.mark.parametrize("mode", ["calls", "sample"])
def test_sigkill_leaves_a_readable_ring_ending_where_the_process_was(
    python: str, mode: str, tmp_path: Path
) -> None:
    script = tmp_path / "prog.py"
    script.write_text(SPIN)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [python, str(script), mode], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "spinning"
        time.sleep(0.3)  # samples of the spinning loop (sample mode)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    (path,) = (tmp_path / "traces").iterdir()
    trace = _read(str(path))
    last = trace.events[-1]
    assert last.name == "spin" and last.file.endswith("prog.py")
    assert last.kind == ("call" if mode == "calls" else "sample")
    assert where(trace).startswith("prog.py:")
    if mode == "sample":
        assert last.stack[-1][2] == "spin" and last.stack[0][2] == "<module>"
        assert "warm" not in _names(trace)  # sampling alone: no call events


LINES = """
import rankscope.trace as rt

def fails():
    raise ValueError("x")

def body():
    a = 1
    try:
        fails()
    except ValueError:
        a = 2
    return a

path = rt.start(out="traces", lines=True)
body()
rt.stop()
print(path)
"""


def test_line_events_and_a_frame_left_by_an_exception(python: str, tmp_path: Path) -> None:
    proc = run_program(python, LINES, tmp_path)
    assert proc.returncode == 0, proc.stderr
    trace = _read(proc.stdout.strip())
    lines = [e.line for e in trace.events if e.kind == "line" and e.name == "body"]
    assert lines[:3] == [8, 9, 10] and 12 in lines and lines[-1] == 13
    # the frame that raised is left (a return event before 3.12, an unwind event after)
    left = [e.kind for e in trace.events if e.name == "fails" and e.kind in ("return", "unwind")]
    assert len(left) == 1
    assert [e.kind for e in trace.events if e.name == "body" and e.kind in ("call", "return")] == [
        "call",
        "return",
    ]


FORK = """
import os
import rankscope.trace as rt

def in_child(): pass
def in_parent(): pass

path = rt.start(out="traces")
pid = os.fork()
if pid == 0:
    in_child()
    os._exit(0)
os.waitpid(pid, 0)
in_parent()
rt.stop()
print(path)
"""


def test_a_forked_child_does_not_write_into_its_parent_s_ring(python: str, tmp_path: Path) -> None:
    proc = run_program(python, FORK, tmp_path)
    assert proc.returncode == 0, proc.stderr
    calls = _names(_read(proc.stdout.strip()))
    assert "in_parent" in calls and "in_child" not in calls
    assert len(list((tmp_path / "traces").iterdir())) == 1


WRAPPED = """
import os, signal, sys, threading
import rankscope
import rankscope.trace as rt

ready = threading.Event()

def load_shard(): pass

def worker_wait():
    ready.wait()

def worker_loop():
    worker_wait()

def batches():
    yield 1
    yield 2

def blocked():
    print(rt.active_path(), flush=True)
    sys.stdout.close()
    os.kill(os.getpid(), signal.SIGKILL)   # killed where it stands, as a hung rank is

def train(steps):
    for step in range(steps):
        load_shard()
        if step < 5:
            rankscope.progress(step=step)
    next(batches())                         # a suspended generator is no open call
    blocked()

def deep(n):
    return train(int(sys.argv[1])) if n == 0 else deep(n - 1)

rt.start(out="traces", ring_records=int(sys.argv[2]))
t = threading.Thread(target=worker_loop, daemon=True, name="loader")
t.start()
deep(int(sys.argv[3]))
"""


def _wrapped(python: str, tmp_path: Path, steps: int, ring: int, depth: int) -> TraceData:
    proc = run_program(python, WRAPPED, tmp_path, str(steps), str(ring), str(depth))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    path = proc.stdout.strip()
    return decode(path, Path(path).read_bytes(), last=3)


def test_a_wrapped_ring_still_knows_every_thread_s_open_calls(
    python: str, hot_path: str, tmp_path: Path
) -> None:
    trace = _wrapped(python, tmp_path, 3000, 512, 3)
    assert trace.wraps >= 10  # the calls that opened the stack were overwritten long ago
    calls = [e for e in trace.events if e.kind == "call"]
    assert calls[-1].name == "blocked"
    tail = file_tail(trace, 3)
    assert [c.name for c in tail.stack] == ["<module>", "deep", "deep", "deep", "deep", "train", "blocked"]
    assert not tail.partial and tail.where == "prog.py:20 blocked"
    assert tail.last is not None and (tail.last.kind, tail.last.name) == ("call", "blocked")
    # the worker thread, started after tracing, blocked since before the first wrap
    (worker,) = (s for t, s in trace.stacks.items() if t != trace.meta["thread"] and s.calls)
    assert [c.name for c in worker.calls] == ["worker_loop", "worker_wait"] and not worker.partial
    # each whole stack names its thread
    full = decode(trace.path, Path(trace.path).read_bytes()).events
    named = {e.thread: e.name for e in full if e.kind == "stack"}
    assert named[trace.meta["thread"]] == "MainThread" and named[worker.thread] == "loader"
    # trace show ends with the same open calls
    data = Path(trace.path).read_bytes()
    source = BytesSource(data)
    lines = list(show_lines(*iter_events(read_layout(trace.path, source, len(data)), source)))
    assert lines[-8] == "# open calls of the thread that started tracing (innermost last):"
    assert [line.split()[-1] for line in lines[-7:]] == [c.name for c in tail.stack]


def test_each_lap_s_whole_stack_agrees_with_the_record_that_filled_the_ring(
    python: str, hot_path: str, tmp_path: Path
) -> None:
    """The record that filled the ring may be a return whose frame is still on the stack when the
    stacks are written: it is left out. Rings of three sizes put a call or a return last."""
    for ring in (101, 102, 103):
        (tmp_path / str(ring)).mkdir()
        trace = _wrapped(python, tmp_path / str(ring), 400, ring, 0)
        events = decode(trace.path, Path(trace.path).read_bytes()).events
        main = trace.meta["thread"]
        lap = max(i for i, e in enumerate(events) if e.kind == "lap")
        before = [e for e in events[:lap] if e.thread == main and e.kind in ("call", "return")]
        stack = next(e for e in events[lap:] if e.kind == "stack" and e.thread == main)
        names = [f[2] for f in stack.stack]
        assert names[:3] == ["<module>", "deep", "train"]
        if before and before[-1].name == "load_shard":
            assert (names[-1] == "load_shard") == (before[-1].kind == "call"), (before[-1], names)


def test_a_stack_the_ring_cannot_hold_is_marked_partial(python: str, hot_path: str, tmp_path: Path) -> None:
    # 40 open calls, a ring of 48 records: a lap's whole stacks may take 12 of them
    trace = _wrapped(python, tmp_path, 50, 48, 40)
    tail = file_tail(trace, 3)
    assert tail.partial and tail.stack[-1].name == "blocked"
    assert tail.where == "prog.py:20 blocked"


def test_progress_steps_are_recorded_in_the_ring(python: str, hot_path: str, tmp_path: Path) -> None:
    trace = _wrapped(python, tmp_path, 5, 4096, 0)
    full = decode(trace.path, Path(trace.path).read_bytes())
    steps = [e.name for e in full.events if e.kind == "progress"]
    assert steps == [f"step {i}" for i in range(5)]
    assert all(
        isinstance(e, Event) and e.thread == full.meta["thread"] for e in full.events if e.kind == "progress"
    )
