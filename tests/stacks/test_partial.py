"""A job whose world size names ranks that are gone: the report is partial (exit 4), and says which."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from tests.support.cli import run_cli


def _rank(rank: int, world: int, local_world: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank % local_world), WORLD_SIZE=str(world))
    env["LOCAL_WORLD_SIZE"] = str(local_world)
    code = "import time; print('ready', flush=True); time.sleep(300)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"  # it runs Python code now
    return proc


@pytest.fixture
def ranks_0_and_2_of_3() -> Iterator[list[int]]:
    """Ranks 0 and 2 of a one-node job of 3: rank 1 exited before anyone looked."""
    procs = [_rank(0, 3, 3), _rank(2, 3, 3)]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()


def test_a_rank_gone_before_discovery_makes_the_run_partial(ranks_0_and_2_of_3: list[int]) -> None:
    first, second = ranks_0_and_2_of_3
    result = run_cli("stacks", "--pid", str(first), "--pid", str(second))
    assert result.returncode == 4, result.stdout + result.stderr
    assert "2 of 2 processes dumped" in result.stdout
    assert "note: rank 1 of world size 3 was not found" in result.stdout
    document = run_cli("stacks", "--pid", str(first), "--pid", str(second), "--json")
    assert document.returncode == 4
    assert document.json()["diagnosis"]["missing_ranks"] == [1]


def test_ranks_of_another_node_leave_the_run_whole() -> None:
    """Ranks 2 and 3 of a 2-node job (2 a node) are all of node 1: ranks 0-1 are on a node not examined."""
    procs = [_rank(2, 4, 2), _rank(3, 4, 2)]
    try:
        result = run_cli("stacks", *(a for p in procs for a in ("--pid", str(p.pid))))
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "note: ranks 0-1 of world size 4 were not found" in result.stdout
