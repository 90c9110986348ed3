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
from rankscope.trace.analyse import where
from rankscope.trace.decode import TraceData, decode


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
    assert len(calls) >= 30
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
