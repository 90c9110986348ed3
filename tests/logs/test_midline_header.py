"""A traceback whose header lands after another process's unfinished line in a shared console
without rank prefixes (``step 10Traceback (most recent call last):``): under PYTHONUNBUFFERED=1
``print`` writes its text and its newline apart, so one worker's stdout and another's traceback on
stderr share a physical line. The real case: two processes of a launcher-like script writing to
one file, the way torchrun without ``--tee`` or DeepSpeed's launcher leave their workers' output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import run_cli

# Two workers on one inherited stdout/stderr (one file). Worker 0 writes "step 10" without its
# newline, then worker 1 raises; worker 0 ends its line after worker 1 is gone.
_JOB = r"""
import os, subprocess, sys, time
here = sys.argv[1]
if len(sys.argv) > 2:
    rank = int(sys.argv[2])
    if rank == 0:
        os.write(1, b"step 9\n")
        os.write(1, b"step 10")
        open(os.path.join(here, "half"), "w").close()
        while not os.path.exists(os.path.join(here, "gone")):
            time.sleep(0.01)
        os.write(1, b"\n")
        sys.exit(0)
    while not os.path.exists(os.path.join(here, "half")):
        time.sleep(0.01)
    def step(batch):
        raise RuntimeError(f"bad batch {batch}")
    step(10)
zero = subprocess.Popen([sys.executable, __file__, here, "0"])
one = subprocess.Popen([sys.executable, __file__, here, "1"])
one.wait()
open(os.path.join(here, "gone"), "w").close()
zero.wait()
print(f"worker 1 exited with return code = {one.returncode}", flush=True)
"""


def test_a_header_after_another_worker_s_unfinished_line_is_read(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    log = tmp_path / "job.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with log.open("wb") as out:
        subprocess.run(
            [sys.executable, str(script), str(tmp_path)],
            stdout=out,
            stderr=out,
            env=env,
            timeout=60,
            check=True,
        )
    text = log.read_text()
    assert "step 10Traceback (most recent call last):\n" in text, text  # the interleave happened
    result = run_cli("logs", "errors", str(log), "--json").json()
    assert result["tracebacks"] == 1, result
    (group,) = result["groups"]
    assert (group["exception_type"], group["message"]) == ("RuntimeError", "bad batch 10"), group
    assert group["frames"][-1]["function"] == "step", group
    first = run_cli("logs", "errors", str(log)).stdout.splitlines()[0]
    assert "RuntimeError: bad batch 10" in first and "in step" in first, first


def test_a_message_that_only_ends_in_the_header_words_is_not_a_traceback(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "step 10\nthe next line says: Traceback (most recent call last):\nand that was all\nstep 11\n"
    )
    result = run_cli("logs", "errors", str(log), "--json").json()
    assert (result["tracebacks"], result["groups"]) == (0, []), result
