"""The job's rankscope and the command line's speak different in-process protocols: the user is told,
nothing breaks, and a protocol-1 handler (whose signal dump crashed threaded processes) is not signalled.

The older rankscope is the real one: the package as of the last protocol-1 commit, taken from this
repository's history with ``git archive``. A newer one cannot exist yet: it is this rankscope with its
protocol number raised, what a later release that keeps answering protocol 2 would look like.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

import pytest

from rankscope.inproc import runtime

ROOT = Path(__file__).resolve().parents[2]
#: The last commit whose handler speaks protocol 1.
PROTOCOL_1 = "c67cdef"
SLEEPER = "import time; print('up', flush=True); time.sleep(120)"
NEWER = (
    "import time, rankscope.inproc.handler as h\n"
    "h.VERSION = 3\n"
    "print(h.enable() and 'up', flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.fixture(scope="module")
def protocol_1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The source tree of the older rankscope (importable with PYTHONPATH=<it>/src)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PROTOCOL_1, "src/rankscope"], capture_output=True, timeout=60
    )
    if archive.returncode != 0:
        pytest.skip(f"commit {PROTOCOL_1} is not in this checkout's history: {archive.stderr.decode()}")
    where = tmp_path_factory.mktemp("protocol-1")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(where, filter="data")
    return where / "src"


def _env(tmp_path: Path, pythonpath: str = "") -> dict[str, str]:
    env = {**os.environ, "RANKSCOPE_INPROC": "1", runtime.ENV_DIR: str(tmp_path / "rt")}
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _job(code: str, env: dict[str, str], procs: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def _stacks(pid: int, pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RANKSCOPE_INPROC")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    argv = [sys.executable, "-m", "rankscope", "stacks", "--pid", str(pid), "--via-signal", "--json"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def test_an_older_rankscope_in_the_job_is_named_and_not_signalled(
    protocol_1: Path, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    job = _job(SLEEPER, _env(tmp_path, str(protocol_1)), started)
    info = json.loads(Path(runtime.files_of(str(tmp_path / "rt"), job.pid)["inproc"]).read_text())
    assert info["version"] == 1  # the older handler really runs there
    out = _stacks(job.pid)
    assert out.returncode == 5, out.stderr
    (failure,) = json.loads(out.stdout)["failures"]
    assert failure["kind"] == "no-handler"
    assert (
        "an older rankscope runs inside the job (in-process protocol 1; this command line speaks 2)"
        in (failure["reason"])
    )
    assert "install this rankscope in the job's environment" in failure["hint"]
    # Not signalled: faulthandler's dump file of the old handler stayed empty, and the job runs on.
    assert Path(runtime.files_of(str(tmp_path / "rt"), job.pid)["stacks"]).read_text() == ""
    assert job.poll() is None


def test_an_older_command_line_leaves_a_newer_job_alone(
    protocol_1: Path, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    job = _job(SLEEPER, _env(tmp_path), started)
    out = _stacks(job.pid, str(protocol_1))
    assert out.returncode == 5, out.stderr
    (failure,) = json.loads(out.stdout)["failures"]
    # The older command line finds protocol 1's signal not caught, says so, and does not send it
    # (an uncaught real-time signal would end the process).
    assert "no longer catches SIGRTMIN+4" in failure["reason"]
    assert job.poll() is None


def test_a_newer_rankscope_in_the_job_answers_and_the_user_is_told(
    tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    env = _env(tmp_path)
    del env["RANKSCOPE_INPROC"]  # enabled by the script, after it raised the number
    job = _job(NEWER, env, started)
    out = _stacks(job.pid)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    (process,) = document["processes"]
    assert process["dumped"] and process["handler_version"] == 3
    assert any(
        "a newer rankscope runs inside the job (in-process protocol 3; this command line speaks 2)" in note
        for note in document["diagnosis"]["notes"]
    )
    assert job.poll() is None
