"""Ctrl-C or SIGTERM while a logs verb reads: it ends at the next block and reports what it read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

#: A job that crashed on rank 3 and whose other ranks keep writing, forever (`tail -f | rankscope`).
WRITER = r"""
import sys, time
out = sys.stdout.buffer
out.write(b"[n1:3]:Traceback (most recent call last):\n[n1:3]:  File \"/w/train.py\", line 3, in <module>\n")
out.write(b"[n1:3]:    1/0\n[n1:3]:ZeroDivisionError: division by zero\n")
step = 0
while True:
    out.write(b"".join(b"[n1:%d]:step %d loss 0.1\n" % (r, step) for r in range(3)) * 300)
    out.flush()
    step += 1
    time.sleep(0.01)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_reading_a_stream_with_what_was_read(sig: int) -> None:
    writer = subprocess.Popen([sys.executable, "-c", WRITER], stdout=subprocess.PIPE, start_new_session=True)
    assert writer.stdout is not None
    reader = subprocess.Popen(
        [sys.executable, "-m", "rankscope", "logs", "errors", "-", "--json"],
        stdin=writer.stdout,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    writer.stdout.close()
    try:
        time.sleep(3)
        os.kill(reader.pid, sig)
        out, err = reader.communicate(timeout=20)  # the stream never ends: only the signal ends it
    finally:
        for proc in (reader, writer):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    name = signal.Signals(sig).name
    assert reader.returncode == 128 + sig, err
    assert (
        err.decode().strip()
        == f"rankscope: interrupted by {name}: the result covers what was read until then"
    )
    doc = json.loads(out)
    assert doc["root_cause"]["label"] == "n1:3"
    (note,) = [n for n in doc["read"]["notes"] if n.startswith("interrupted")]
    assert note.startswith(f"interrupted by {name} after ") and "only what was read" in note
