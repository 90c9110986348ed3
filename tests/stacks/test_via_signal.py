"""`rankscope stacks --via-signal` and the automatic fallback, on a real hung 3-rank torchrun job (gloo)
started with RANKSCOPE_INPROC=1 and no code change for the handler (the .pth bootstrap enables it).

The job (hang_job.py, scenario "steps"): rank r marks step r+1 with rankscope.progress(); ranks 0-1
wait in one barrier at different steps, rank 2 loops in its data loader.

py-spy is made to fail with a stand-in: an executable that prints py-spy's own ptrace refusal and
exits 1, put where rankscope looks for py-spy (this machine has no yama and the tests run as root,
so the real py-spy is never refused here).

Every run here passes --no-fr: these tests are about the stacks, and a rank's first flight-recorder dump
with Python frames imports torch's compiler stack into it (about 2 CPU-s a rank). The recorders asked
for through the handler are tested across nodes in tests/cluster/test_stacks_via_signal_ssh.py and in
tests/fr/test_fr_stacks_inproc.py.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.jobs import torchrun_job

from rankscope.demo.launch import LaunchedJob
from rankscope.inproc import runtime

pytestmark = pytest.mark.slow

REFUSAL = (
    "Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'\n"
)


@pytest.fixture(scope="module")
def steps_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LaunchedJob, Path]]:
    workdir = tmp_path_factory.mktemp("steps")
    directory = workdir / "rt"
    env = {**os.environ, "RANKSCOPE_INPROC": "1", runtime.ENV_DIR: str(directory)}
    with torchrun_job(workdir, "--scenario", "steps", "--culprit", "2", nproc=3, env=env) as job:
        yield job, directory


def stacks(*args: str, standin: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`rankscope stacks --no-fr ARGS`; with ``standin``, that file runs where py-spy would."""
    args = ("--no-fr", *args)
    if standin is None:
        argv = [sys.executable, "-m", "rankscope", "stacks", *args]
    else:
        code = (
            "import sys, rankscope.stacks.local as local\n"
            f"local.find_pyspy = lambda: {str(standin)!r}\n"
            "from rankscope.cli.main import main\n"
            "sys.argv = ['rankscope', *sys.argv[1:]]\n"
            "main()\n"
        )
        argv = [sys.executable, "-c", code, "stacks", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def groups(document: dict[str, Any]) -> list[tuple[str, tuple[int, ...], tuple[tuple[str, int], ...]]]:
    """Each group as (thread role, ranks, frames by file and line): function names differ between
    faulthandler (code names) and py-spy (qualified names)."""
    return sorted(
        (
            g["thread"],
            tuple(sorted(m["rank"] for m in g["members"])),
            tuple((f["filename"], f["line"]) for f in g["frames"]),
        )
        for g in document["groups"]
    )


@pytest.fixture(scope="module")
def pyspy_document(steps_job: tuple[LaunchedJob, Path]) -> dict[str, Any]:
    out = stacks("--pid", str(steps_job[0].pid), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_via_signal_gives_the_groups_of_pyspy_with_each_ranks_step(
    steps_job: tuple[LaunchedJob, Path], pyspy_document: dict[str, Any], tmp_path: Path
) -> None:
    job, _ = steps_job
    out = stacks("--pid", str(job.pid), "--via-signal", "--json", "--out", str(tmp_path / "saved"))
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert groups(document) == groups(pyspy_document)
    assert document["diagnosis"]["divergent_ranks"] == pyspy_document["diagnosis"]["divergent_ranks"] == [2]
    assert all(p["via"] == "signal" for p in document["processes"])
    assert {p["rank"]["rank"]: p["progress"]["step"] for p in document["processes"]} == {0: 1, 1: 2, 2: 3}
    assert document["diagnosis"]["findings"][0]["steps"] == {"1": "rank 0", "2": "rank 1"}
    # Named as py-spy names them; rankscope's own request thread left out by both.
    assert {g["thread"] for g in document["groups"]} == {"MainThread", "heartbeat-N"}
    assert {g["thread"] for g in pyspy_document["groups"]} == {"MainThread", "heartbeat-N"}
    # --out keeps the dumps (py-spy's JSON form): --from reads them back into the same groups.
    again = stacks("--from", str(tmp_path / "saved"), "--json")
    assert again.returncode == 0, again.stderr
    assert groups(json.loads(again.stdout)) == groups(document)


def test_text_tells_ranks_on_one_line_at_different_steps_apart(steps_job: tuple[LaunchedJob, Path]) -> None:
    out = stacks("--pid", str(steps_job[0].pid), "--via-signal", "--no-color")
    assert out.returncode == 0, out.stderr
    assert "ranks 0-1 · at different steps: step 1: rank 0; step 2: rank 1" in out.stdout
    assert "rank 2 · step 3 phase=train" in out.stdout
    assert "ranks 0-1 are at the same place but at different steps" in out.stdout
    assert "rank 0 is behind" in out.stdout


def test_refused_pyspy_falls_back_to_the_handler(
    steps_job: tuple[LaunchedJob, Path], pyspy_document: dict[str, Any], tmp_path: Path
) -> None:
    standin = tmp_path / "py-spy"
    standin.write_text(f"#!/bin/sh\nprintf '%s' {json.dumps(REFUSAL)} >&2\nexit 1\n")
    standin.chmod(stat.S_IRWXU)
    out = stacks("--pid", str(steps_job[0].pid), "--json", standin=standin)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert groups(document) == groups(pyspy_document)
    assert all(p["via"] == "signal" for p in document["processes"])
    assert any("dumped through the in-process handler" in n for n in document["diagnosis"]["notes"])


SLEEPER = "import sys, time; print('up', flush=True); time.sleep(120)"


def _sleeper(env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEPER], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def test_each_rank_without_a_usable_handler_says_why(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if k != "RANKSCOPE_INPROC"}
    base[runtime.ENV_DIR] = str(tmp_path / "rt")
    plain = _sleeper(base)
    damaged = _sleeper({**base, "RANKSCOPE_INPROC": "1"})
    planted = _sleeper({**base, "RANKSCOPE_INPROC": "1"})
    procs = [plain, damaged, planted]
    victim = tmp_path / "victim"
    victim.write_text("not rankscope's to truncate\n")
    try:
        description = runtime.files_of(str(tmp_path / "rt"), damaged.pid)["inproc"]
        Path(description).write_text("{cut sh")
        # A hard link to another file where the request FIFO was: rankscope would write into it.
        fifo = Path(runtime.files_of(str(tmp_path / "rt"), planted.pid)["req"])
        fifo.unlink()
        os.link(victim, fifo)
        gone = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
        )
        dead = int(gone.stdout)
        out = stacks(
            "--via-signal", "--json", *(f"--pid={p}" for p in (plain.pid, damaged.pid, planted.pid, dead))
        )
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert out.returncode == 5, out.stderr  # every target failed
    failures = {f["target"]: f for f in json.loads(out.stdout)["failures"]}
    no_handler = failures[f"pid {plain.pid}"]
    assert no_handler["kind"] == "no-handler" and "no in-process handler" in no_handler["reason"]
    assert "RANKSCOPE_INPROC=1" in no_handler["hint"]
    assert "unreadable handler description" in failures[f"pid {damaged.pid}"]["reason"]
    assert failures[f"pid {dead}"]["stage"] == "discover"
    assert "does not read its requests" in failures[f"pid {planted.pid}"]["reason"]
    assert victim.read_text() == "not rankscope's to truncate\n"
    assert {p.returncode for p in procs} == {-signal.SIGKILL}  # none was ended by a signal of ours


HOLDS_GIL = """
import ctypes, threading, time
libc = ctypes.PyDLL(None)          # PyDLL: the GIL stays held during the call
mutex = ctypes.create_string_buffer(64)  # zeroed: a default pthread mutex
def beat():
    while True:
        time.sleep(0.1)
threading.Thread(target=beat, name="heartbeat-0", daemon=True).start()
def hold_gil_forever():
    libc.pthread_mutex_lock(mutex)
    print("up", flush=True)
    libc.pthread_mutex_lock(mutex)  # locks itself out, GIL held: no Python code runs again
hold_gil_forever()
"""


def test_a_rank_that_holds_the_gil_fails_with_why_and_runs_on(tmp_path: Path) -> None:
    """The stacks are taken by the handler's thread, under the GIL: a rank that never releases the GIL
    cannot answer. It fails within --timeout with the reason and the way around (py-spy), unharmed."""
    env = {**os.environ, "RANKSCOPE_INPROC": "1", runtime.ENV_DIR: str(tmp_path / "rt"), "RANK": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDS_GIL], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        out = stacks("--pid", str(proc.pid), "--via-signal", "--json", "--timeout", "1")
        assert proc.poll() is None
        pyspy = stacks("--pid", str(proc.pid), "--json")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert out.returncode == 5, out.stderr
    (failure,) = json.loads(out.stdout)["failures"]
    assert failure["kind"] == "timed-out" and "no answer from its in-process handler" in failure["reason"]
    assert "py-spy (without --via-signal)" in failure["hint"]
    assert pyspy.returncode == 0, pyspy.stderr
    main = next(g for g in json.loads(pyspy.stdout)["groups"] if g["is_main"])
    assert [f["function"] for f in main["frames"]][-1] == "hold_gil_forever"
