"""The pure and file-level pieces of rankscope.breakpoint and rankscope attach."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from tests.support.cli import run_cli

from rankscope import lifetime
from rankscope.debug import rendezvous
from rankscope.debug.client import parse_address, pdb_attach_argv
from rankscope.errors import BadInputError


@pytest.mark.parametrize(
    ("text", "address"),
    [("127.0.0.1:41234", ("127.0.0.1", 41234)), ("[::1]:5", ("::1", 5)), ("node7:80", ("node7", 80))],
)
def test_parse_address(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", ":80", "a:b"])
def test_parse_address_refuses(text: str) -> None:
    with pytest.raises(BadInputError):
        parse_address(text)


def test_a_flag_older_than_the_waiting_process_is_an_earlier_jobs(tmp_path: Path) -> None:
    path = tmp_path / "job-1.released"
    started = time.time() - 1.0  # a file's time stamp may lag time.time() by a clock tick
    flag = rendezvous.FileFlag(str(path), started)
    assert not flag.is_set() and flag.note() is None
    flag.post("rank 1 ... attach with: rankscope attach 127.0.0.1:1 --token t")
    shown: list[str] = []
    assert not flag.wait(0.1, shown.append)  # the note is handed over while the flag is not set yet
    assert shown == ["rank 1 ... attach with: rankscope attach 127.0.0.1:1 --token t"]
    flag.set()
    assert flag.is_set() and flag.wait(0)
    for left_over in (path, Path(f"{path}.note")):  # from a job that ran before this process
        os.utime(left_over, (started - 60, started - 60))
    assert not flag.is_set() and flag.note() is None
    assert not flag.wait(0.2)


def test_job_key_tells_jobs_apart() -> None:
    torchrun = {"TORCHELASTIC_RUN_ID": "r1", "TORCHELASTIC_RESTART_COUNT": "0", "MASTER_PORT": "1"}
    assert rendezvous.job_key(torchrun) != rendezvous.job_key({**torchrun, "TORCHELASTIC_RESTART_COUNT": "1"})
    assert rendezvous.job_key({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}) == "slurm-7-0"
    assert rendezvous.job_key({"MASTER_ADDR": "n1", "MASTER_PORT": "29500"}) == "master-n1-29500"
    assert "/" not in rendezvous.job_key({"SLURM_JOB_ID": "../x", "SLURM_STEP_ID": "0"})


def test_no_flag_for_a_job_across_nodes_without_a_shared_directory(tmp_path: Path) -> None:
    assert rendezvous.flag_for(1, {"MASTER_ADDR": "n1", "MASTER_PORT": "1"}, spans_nodes=True) is None
    shared = {"MASTER_ADDR": "n1", "MASTER_PORT": "1", "RANKSCOPE_BREAKPOINT_DIR": str(tmp_path)}
    flag = rendezvous.flag_for(1, shared, spans_nodes=True)
    assert isinstance(flag, rendezvous.FileFlag) and flag.where == str(tmp_path / "master-n1-1-1.released")


def test_attach_pid_never_runs_a_program_that_is_not_python(monkeypatch: pytest.MonkeyPatch) -> None:
    # `yes -c CODE` would print forever into attach's memory until its 10 s timeout; other programs
    # could do worse: only an executable named python* is asked for its version.
    ran: list[list[str]] = []
    monkeypatch.setattr(
        lifetime,
        "run",
        lambda argv, *args, **kwargs: ran.append(argv) or types.SimpleNamespace(text=lambda: ""),
    )
    worker = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        with pytest.raises(BadInputError, match=f"process {worker.pid} does not look like a Python process"):
            pdb_attach_argv(worker.pid)
        assert ran == []
    finally:
        os.killpg(worker.pid, 9)
        worker.wait()


def test_a_process_without_a_terminal_names_itself_once_in_its_attach_line() -> None:
    code = "import rankscope\nrankscope.ForkedPdb().set_trace()\nx = 1\n"
    program = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")},
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert program.stderr is not None
        line = program.stderr.readline().rstrip("\n")
        found = re.fullmatch(
            r"rankscope: process (\d+) on (\S+) is stopped in pdb with no terminal; "
            r"attach on (\S+) with: rankscope attach --pid (\d+)",
            line,
        )
        assert found is not None and found[1] == found[4] == str(program.pid), line
        assert found[2] == found[3], line
    finally:
        os.killpg(program.pid, 9)
        program.wait()


def test_a_rank_that_is_not_a_number_says_so_once_and_never_raises(tmp_path: Path) -> None:
    code = "import rankscope\nrankscope.breakpoint(rank='one')\nprint('went on')\n"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TORCHELASTIC_", "SLURM_"))}
    env.update(
        PYTHONPATH=str(Path(__file__).parents[2] / "src"),
        RANK="0",
        WORLD_SIZE="2",
        RANKSCOPE_BREAKPOINT_DIR=str(tmp_path),
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (out.returncode, out.stdout) == (0, "went on\n"), out.stderr
    assert out.stderr == "rankscope: breakpoint: rank='one' is not a rank number; nobody stops\n"


def test_attach_pid_of_a_python_removed_since_it_started_is_one_line(tmp_path: Path) -> None:
    program = tmp_path / "python3.14"  # stands in for a rank whose Python was upgraded under it
    shutil.copy("/bin/sleep", program)
    worker = subprocess.Popen([str(program), "60"], start_new_session=True)
    try:
        program.unlink()
        out = run_cli("attach", "--pid", str(worker.pid), timeout=60)
        assert out.returncode == 6, out.stderr
        assert out.stderr.startswith(
            f"rankscope: error: process {worker.pid} runs {program} (deleted): its Python was removed"
        )
        assert out.stderr.count("\n") == 1
    finally:
        os.killpg(worker.pid, 9)
        worker.wait()


def _run_rank(code: str, tmp_path: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """``code`` as one process of a job, without a terminal, in an environment of ``env_vars`` alone."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TORCHELASTIC_", "SLURM_", "RANKSCOPE_", "MASTER_", "RANK", "WORLD_SIZE"))
    }
    env.update(
        PYTHONPATH=str(Path(__file__).parents[2] / "src"), RANKSCOPE_BREAKPOINT_DIR=str(tmp_path), **env_vars
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_world_size_without_a_rank_stops_nobody(tmp_path: Path) -> None:
    # Every process of such a job would take itself for the one to stop, and all would hang.
    out = _run_rank(
        "import rankscope\nrankscope.breakpoint(rank=1)\nprint('went on')\n", tmp_path, WORLD_SIZE="2"
    )
    assert (out.returncode, out.stdout) == (0, "went on\n"), out.stderr
    assert (
        out.stderr
        == "rankscope: breakpoint: WORLD_SIZE=2 but no RANK says which process this is; nobody stops\n"
    )


def test_an_unreachable_torchrun_store_is_one_line_and_the_rank_goes_on(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # closed when the block ends: nothing listens there
    code = "import torch.distributed\nimport rankscope\nrankscope.breakpoint(rank=1)\nprint('went on')\n"
    out = _run_rank(
        code,
        tmp_path,
        RANK="0",
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHELASTIC_USE_AGENT_STORE="True",
        TORCHELASTIC_RUN_ID="job",
    )
    assert (out.returncode, out.stdout) == (0, "went on\n"), out.stderr
    assert out.stderr == (
        f"rankscope: breakpoint: rank 0: cannot share a flag with the other ranks (torchrun's store at "
        f"127.0.0.1:{port} cannot be reached: Connection refused); they will not wait\n"
    )


def test_flag_files_a_day_old_are_removed_when_a_flag_is_set(tmp_path: Path) -> None:
    started = time.time() - 1.0
    old = [tmp_path / "torchrun-r0-0-1-2-1.released", tmp_path / "torchrun-r0-0-1-2-1.released.note"]
    recent = tmp_path / "master-n1-1-1.released"
    other = tmp_path / "notes.txt"  # not a flag: never touched
    for path in (*old, recent, other):
        path.write_text("")
    day_ago = time.time() - rendezvous.STALE_FLAG_AGE - 60
    for path in (*old, other):
        os.utime(path, (day_ago, day_ago))
    rendezvous.FileFlag(str(tmp_path / "slurm-7-0-1.released"), started).set()
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "master-n1-1-1.released",
        "notes.txt",
        "slurm-7-0-1.released",
    ]


class _CountedFlag(rendezvous.Flag):
    """Set at its 30th poll."""

    def __init__(self) -> None:
        self.polls = 0

    def is_set(self) -> bool:
        self.polls += 1
        return self.polls >= 30

    def note(self) -> None:
        return None


@pytest.mark.parametrize(("world", "longest"), [(2, 0.2), (60, 0.2), (1024, 1024 / 300), (3000, 10.0)])
def test_waiting_ranks_poll_less_often_in_a_large_job(
    world: int, longest: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(rendezvous.time, "sleep", pauses.append)  # the pauses asked for, not waited
    assert _CountedFlag().wait(world=world)
    assert pauses[0] == 0.05 and pauses == sorted(pauses) and pauses[-1] == pytest.approx(longest)


def test_the_ranks_go_on_together_at_the_moment_the_release_names(tmp_path: Path) -> None:
    path = str(tmp_path / "job-1.released")
    stopped, waiting = (
        rendezvous.FileFlag(path, time.time() - 1.0),
        rendezvous.FileFlag(path, time.time() - 1.0),
    )
    before = time.time()
    stopped.release(world=2)  # returns at the moment it names
    at = float(waiting.value())
    assert before + 0.2 < at <= time.time()  # beyond the longest poll of a 2-rank job
    assert waiting.wait(0)
    assert time.time() >= at
