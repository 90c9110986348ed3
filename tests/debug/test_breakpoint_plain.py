"""rankscope.breakpoint() without torch, on the oldest Python it supports (3.9): two processes of a
job that meet through a file; a stop that cannot be set up, which must not end the job; and
rankscope.ForkedPdb in a forked child."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from tests.debug.conftest import Terminal

SRC = Path(__file__).parents[2] / "src"
JOB = Path(__file__).parent / "jobs" / "plain_job.py"
#: The oldest Python supported inside training processes (PDB_TEST_PYTHON: another, to check it by hand).
PYTHON_39 = Path(os.environ.get("PDB_TEST_PYTHON", "/root/.pyenv/versions/3.9.18/bin/python"))

pytestmark = pytest.mark.skipif(not PYTHON_39.exists(), reason=f"no Python 3.9 at {PYTHON_39}")


def _env(rank: int, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TORCHELASTIC_", "SLURM_", "RANKSCOPE_", "OMPI_", "PMI"))
    }
    env.update(
        PYTHONPATH=str(SRC),
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29400",
        RANKSCOPE_BREAKPOINT_DIR=str(tmp_path),
        **extra,
    )
    return env


def _start(rank: int, tmp_path: Path, **extra: str) -> subprocess.Popen[str]:
    """One rank with no terminal."""
    return subprocess.Popen(
        [str(PYTHON_39), str(JOB)],
        env=_env(rank, tmp_path, **extra),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_python_39_without_torch_rank_0_waits_on_a_file(
    terminal: Callable[..., Terminal], tmp_path: Path
) -> None:
    rank_0 = _start(0, tmp_path)
    try:
        rank_1 = terminal([str(PYTHON_39), str(JOB)], _env(1, tmp_path))  # /dev/tty: its controlling terminal
        stop = rank_1.expect("(Pdb rank 1) ")
        # In the caller's frame: on the line after the call, or (pdb of Python 3.13 and later) on the call.
        assert (
            '-> print(f"rank {rank} went on", flush=True)' in stop
            or "-> rankscope.breakpoint(rank=1)" in stop
        )
        rank_1.send("p rank")
        assert rank_1.expect("(Pdb rank 1) ").split("\n")[1] == "1"
        assert rank_0.poll() is None, "rank 0 did not wait"
        rank_1.send("c")
        assert rank_1.wait(30) == 0, rank_1.seen
        out, err = rank_0.communicate(timeout=30)
        assert (rank_0.returncode, out) == (0, "rank 0 went on\n"), err
        assert "rank 1 went on" in rank_1.seen
    finally:
        if rank_0.poll() is None:
            os.killpg(rank_0.pid, 9)
            rank_0.wait()


def test_a_stop_that_cannot_be_set_up_says_so_once_and_releases_the_others(tmp_path: Path) -> None:
    # No terminal, and an address this machine does not have (TEST-NET-1): pdb cannot be served.
    extra = {"RANKSCOPE_BREAKPOINT_REMOTE": "1", "RANKSCOPE_BREAKPOINT_HOST": "192.0.2.1"}
    ranks = [_start(0, tmp_path, **extra)]
    try:
        ranks.append(_start(1, tmp_path, **extra))
        (out_0, err_0), (out_1, err_1) = (rank.communicate(timeout=60) for rank in ranks)
        assert [rank.returncode for rank in ranks] == [0, 0], (err_0, err_1)
        assert (out_0, out_1) == ("rank 0 went on\n", "rank 1 went on\n")
        assert err_1.startswith(
            "rankscope: rank 1: cannot stop in pdb: no terminal, and cannot listen on 192.0.2.1:0"
        )
        assert len(err_1.splitlines()) == 1 and err_0 == ""
    finally:
        for rank in ranks:
            if rank.poll() is None:
                os.killpg(rank.pid, 9)
                rank.wait()


def test_forked_pdb_in_a_multiprocessing_child(terminal: Callable[..., Terminal]) -> None:
    program = terminal(
        [str(PYTHON_39), str(Path(__file__).parent / "jobs" / "forked_job.py")], _env(0, Path())
    )
    stop = program.expect("(Pdb) ")
    assert "-> doubled = n * 2" in stop or "-> rankscope.ForkedPdb().set_trace()" in stop  # 3.13: the call
    program.send("p n")
    assert program.expect("(Pdb) ").split("\n")[1] == "21"
    program.send("q")  # detaches: the child goes on and ends well
    assert program.wait(30) == 0, program.seen
    assert "child doubled 42" in program.seen and "child exit 0" in program.seen


def test_remote_pdb_on_python_39_and_q_over_attach(terminal: Callable[..., Terminal], tmp_path: Path) -> None:
    extra = {"RANKSCOPE_BREAKPOINT_REMOTE": "1"}  # a socket although the test could give a terminal
    ranks = [_start(0, tmp_path, **extra), _start(1, tmp_path, **extra)]
    try:
        assert ranks[1].stderr is not None
        line = ranks[1].stderr.readline()
        found = re.search(r"attach on \S+ with: rankscope attach --pid (\d+)$", line)
        assert found is not None and found[1] == str(ranks[1].pid), line
        client = terminal(
            [sys.executable, "-m", "rankscope", "attach", "--pid", found[1]],
            {**os.environ, "PYTHONPATH": str(SRC)},
        )
        client.expect("(Pdb rank 1) ")
        client.send("p rank")
        assert client.expect("(Pdb rank 1) ").split("\n")[1] == "1"
        assert ranks[0].poll() is None, "rank 0 did not wait"
        # interact: an interpreter on the socket (not on the rank's own stdin and stdout).
        client.send("interact")
        client.expect(">>> ")
        client.send("print(rank * 10)")
        assert client.expect(">>> ").split("\n")[1] == "10"
        client.send("rank * 7")
        assert client.expect(">>> ").split("\n")[1] == "7"
        client.send("exit()")  # back to pdb, the rank's stdin left open
        client.expect("(Pdb rank 1) ")
        client.send("q")
        assert client.wait(30) == 0, client.seen
        assert "detached; the program goes on" in client.seen and "the session with rank 1" in client.seen
        outs = [rank.communicate(timeout=30)[0] for rank in ranks]
        assert [rank.returncode for rank in ranks] == [0, 0]
        assert outs == ["rank 0 went on\n", "rank 1 went on\n"]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                os.killpg(rank.pid, 9)
                rank.wait()
