"""The flight recorder request never costs a running job seconds: torch's first dump with Python frames
imports torch._inductor and torch._dynamo (about 800 modules) on the handler's thread, which competes
with the job for the GIL. A running rank's first dump leaves the frames out and says so; a blocked one
(a hang, what the recorder is for) gets them; ``{"frames": true}`` asks anyway.

A real torch process: a one-rank gloo group with all_reduces in its recorder (torch 2.13 records by
default).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.leftovers import wait_for
from tests.support.sshd import free_port

from rankscope.inproc import runtime

pytestmark = pytest.mark.slow

JOB = """
import os, sys, time, torch, torch.distributed as dist
from rankscope.inproc.handler import register_request
register_request("imported", lambda args: "torch._inductor" in sys.modules)
dist.init_process_group("gloo")
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
print("up", flush=True)
if sys.argv[1] == "running":
    end = time.monotonic() + 120
    while time.monotonic() < end:
        sum(i * i for i in range(20000))   # the job's loop: Python, holding the GIL
        dist.all_reduce(t)
else:
    time.sleep(120)                       # blocked: the main thread stays where it is
"""


@pytest.fixture
def job(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    pytest.importorskip("torch.distributed")
    env = {
        **os.environ,
        "RANKSCOPE_INPROC": "1",
        runtime.ENV_DIR: str(tmp_path / "rt"),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", JOB, request.param],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        yield proc, tmp_path / "rt"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _ask(directory: Path, pid: int, kind: str, args: dict[str, Any], ident: str) -> Any:
    base = json.loads(Path(runtime.files_of(str(directory), pid)["inproc"]).read_text())["base"]
    fd = os.open(directory / f"{base}.req", os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, json.dumps({"v": 2, "id": ident, "kind": kind, "args": args}).encode() + b"\n")
    os.close(fd)
    reply = directory / f"{base}.{ident}.reply"
    deadline = time.monotonic() + 120
    while not reply.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    answer = json.loads(reply.read_text())
    assert answer["ok"], answer
    return answer["result"]


@pytest.mark.parametrize("job", ["running"], indirect=True)
def test_a_running_ranks_first_dump_leaves_the_frames_out(job: tuple[subprocess.Popen[str], Path]) -> None:
    proc, directory = job
    result = _ask(directory, proc.pid, "fr", {"id": "a1"}, "a1")
    assert result["name"].endswith(".a1.fr")
    assert result["problem"].startswith("written without Python frames: the rank was running")
    assert _ask(directory, proc.pid, "imported", {}, "a2") is False  # nothing heavy was imported
    # Asked for anyway: the frames, and the import with them.
    forced = _ask(directory, proc.pid, "fr", {"id": "a3", "frames": True}, "a3")
    assert forced["problem"] is None
    assert _ask(directory, proc.pid, "imported", {}, "a4") is True
    assert proc.poll() is None


@pytest.mark.parametrize("job", ["blocked"], indirect=True)
def test_a_blocked_rank_gets_its_frames(job: tuple[subprocess.Popen[str], Path]) -> None:
    proc, directory = job
    # "up" is printed just before the sleep: on a loaded machine the main thread may still be running
    # Python between the two, and the handler rightly sees a running rank.
    wait_for(lambda: "nanosleep" in Path(f"/proc/{proc.pid}/wchan").read_text(), 30, "the sleep")
    result = _ask(directory, proc.pid, "fr", {"id": "b1"}, "b1")
    assert result["name"].endswith(".b1.fr") and result["problem"] is None
    assert _ask(directory, proc.pid, "imported", {}, "b2") is True


@pytest.mark.parametrize("job", ["running"], indirect=True)
def test_the_recorders_status_is_a_few_numbers_that_advance(job: tuple[subprocess.Popen[str], Path]) -> None:
    """``fr_status``: each process group's newest collective enqueued and completed, no entries, no frames,
    nothing imported; a running job's numbers grow between two asks."""
    proc, directory = job
    first = _ask(directory, proc.pid, "fr_status", {}, "c1")
    assert first["problem"] is None and set(first["groups"]) == {"0"}, first
    enqueued, completed = first["groups"]["0"]
    assert enqueued >= 3 and completed >= 3  # the three all_reduces before "up", at least
    wait_for(
        lambda: _ask(directory, proc.pid, "fr_status", {}, "c2")["groups"]["0"][0] > enqueued,
        30,
        "a later collective",
    )
    assert not list(directory.glob("*.fr"))  # no dump written
    assert _ask(directory, proc.pid, "imported", {}, "c3") is False
    assert proc.poll() is None


def test_a_process_without_torch_says_so_and_imports_nothing(tmp_path: Path) -> None:
    code = "import sys, time; print('up', flush=True); time.sleep(60)"
    env = {**os.environ, "RANKSCOPE_INPROC": "1", runtime.ENV_DIR: str(tmp_path / "rt")}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        result = _ask(tmp_path / "rt", proc.pid, "fr_status", {}, "d1")
        assert result == {"groups": {}, "problem": "torch.distributed is not imported in this process"}
        modules = _ask(tmp_path / "rt", proc.pid, "threads", {}, "d2")  # the handler still answers
        assert modules and proc.poll() is None
        assert "torch" not in Path(f"/proc/{proc.pid}/maps").read_text()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
