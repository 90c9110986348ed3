"""A full filesystem under the trace files: the job runs on with its own exit code, never SIGBUS.

Real tmpfs mounts (tests/support/mounts.py), both hot paths (C and pure Python), ring and --full.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.mounts import small_tmpfs
from tests.trace.conftest import run_program

from rankscope.trace.decode import decode

PROGRAM = """
def f(): pass

try:
    for _ in range(100000):
        f()
except BaseException as exc:
    print("raised into the program:", repr(exc))
print("done")
raise SystemExit(7)
"""


@pytest.mark.parametrize("mode", ["ring", "full"])
def test_trace_run_onto_a_full_filesystem_runs_the_job_untraced(
    hot_path: str, mode: str, tmp_path: Path
) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    env = {**os.environ, "RANKSCOPE_TRACE_PURE": "1" if hot_path == "pure" else "0"}
    with small_tmpfs(tmp_path / "full", "1m", fill=True) as out:
        argv = ["trace", "run", *(["--full"] if mode == "full" else []), "--out", str(out), "--", str(script)]
        result = run_cli(*argv, env=env)
        assert result.returncode == 7, result.stderr  # the program's own code (it was 135: SIGBUS)
        assert result.returncode != 128 + signal.SIGBUS
        assert result.stdout == "done\n"
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "tracing not started" in lines[0] and "No space left on device" in lines[0]
        assert "runs untraced" in lines[0]
        assert sorted(p.name for p in out.iterdir()) == ["filler"]  # no half-made trace file left


FILLS_UP = """
import rankscope.trace as rt

def f(): pass

path = rt.start(out="full", full=True)
try:
    for _ in range(100000):
        f()
except BaseException as exc:
    print("raised into the program:", repr(exc))
rt.stop()
print(path)
raise SystemExit(7)
"""


def test_full_mode_filling_the_disk_switches_itself_off_and_keeps_what_it_wrote(
    python: str, hot_path: str, tmp_path: Path
) -> None:
    # 3 MiB: the header and names (1 MiB) and one 1.5 MiB chunk of records fit, the second does not
    with small_tmpfs(tmp_path / "full", "3m"):
        proc = run_program(python, FILLS_UP, tmp_path)
        assert proc.returncode == 7, proc.stderr
        assert "raised into the program" not in proc.stdout
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "tracing switched off" in lines[0], proc.stderr
        assert "No space left on device" in lines[0] and "Traceback" not in proc.stderr
        path = Path(proc.stdout.strip())
        trace = decode(str(path), path.read_bytes())
    calls = [e.name for e in trace.events if e.kind == "call"]
    assert calls[0] == "f" and 1000 < len(calls) < 100000  # the first chunk, whole
    assert ("(C)" in trace.meta["hook"]) == (hot_path == "c")


def test_trace_run_with_an_out_that_cannot_be_a_directory_runs_the_job_untraced(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("")
    result = run_cli("trace", "run", "--out", str(not_a_directory), "--", str(script))
    assert result.returncode == 7 and result.stdout == "done\n", result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "tracing not started" in line and "runs untraced" in line
