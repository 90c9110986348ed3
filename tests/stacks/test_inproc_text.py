"""faulthandler's text into the threads py-spy's dumps give (pure)."""

from __future__ import annotations

import json

import pytest

from rankscope.stacks.inproc_text import CUT, as_pyspy_json, parse_faulthandler
from rankscope.stacks.pyspy import parse_dump

MAIN, BEAT, OWN, BARE = 0x7F42E42A7B80, 0x7F42E2E1C6C0, 0x7F42E361D6C0, 0x7F0000000001
TEXT = f"""Thread 0x{BEAT:016x} (most recent call first):
  File "/job/train.py", line 37 in heartbeat
  File "/usr/lib/python3.11/threading.py", line 982 in run

Thread 0x{OWN:016x} (most recent call first):
  File "/site/rankscope/inproc/handler.py", line 173 in serve

Thread 0x{BARE:016x} (most recent call first):
  <no Python frame>

Current thread 0x{MAIN:016x} (most recent call first):
  File "/job/train.py", line ??? in step
  File "/job/train.py", line 88 in main
  ...
"""


def test_threads_frames_names_and_cuts() -> None:
    names = {MAIN: ("MainThread", 4711), BEAT: ("heartbeat-0", 4713)}
    threads = parse_faulthandler(TEXT, 4711, main_ident=MAIN, names=names, skip=OWN)
    assert [t.name for t in threads] == ["MainThread", "heartbeat-0", ""]
    main, beat, bare = threads
    assert main.is_main and main.thread_id == 4711
    assert main.frames[0] == CUT  # faulthandler stopped writing before the outermost frames
    assert [(f.function, f.line) for f in main.frames[1:]] == [("main", 88), ("step", 0)]
    assert [f.function for f in beat.frames] == ["run", "heartbeat"]  # outermost first
    assert bare.frames == () and bare.thread_id == BARE


def test_without_names_the_main_thread_is_still_known() -> None:
    threads = parse_faulthandler(TEXT, 4711, main_ident=MAIN)
    assert threads[0].is_main and threads[0].name == "MainThread" and threads[0].thread_id == 4711
    assert {t.name for t in threads[1:]} == {""}  # grouped as "unnamed", never by a per-process address


def test_pyspy_json_form_reads_back_to_the_same_threads() -> None:
    threads = parse_faulthandler(TEXT, 4711, main_ident=MAIN, names={MAIN: ("MainThread", 4711)})
    assert [(t.name, t.frames, t.is_main) for t in parse_dump(as_pyspy_json(threads), 4711)] == [
        (t.name, t.frames, t.is_main) for t in threads
    ]
    assert json.loads(as_pyspy_json(threads))[0]["thread_name"] == "MainThread"


def test_text_that_is_not_a_dump_is_refused() -> None:
    with pytest.raises(ValueError, match="no thread"):
        parse_faulthandler("Segmentation fault\n", 1)
