"""Group members gloo's recorder does not name (torch 2.13): a real 3-rank gloo job (tests/fr/fr_job.py
``member-skips``) where rank 0 waits in the first all_reduce of ``new_group([0, 1])`` and rank 1, busy in its
own code, never issues it; rank 2 (no member) sleeps.

Live, each rank's in-process handler names the groups it belongs to beside its dump, and the verdict names
rank 1. From the files alone (no members named), the verdict says a member never issued it and which ranks
it may be, instead of "no desync".
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import run_cli
from tests.support.ranks_job import ranks_job

from rankscope.fr.records import RankDump, add_members

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[int], Path]]:
    pytest.importorskip("torch")
    runtime = tmp_path_factory.mktemp("members")
    dumps = runtime / "dumps"
    dumps.mkdir()
    with ranks_job(runtime, "member-skips", 3, dumps=dumps) as pids:
        yield pids, dumps


def _live(pids: list[int]) -> dict[str, Any]:
    """The --json report once rank 0's recorder shows the subgroup's all_reduce (seconds after start)."""
    args = [arg for pid in pids for arg in ("--pid", str(pid))]
    deadline = time.monotonic() + 120
    while True:
        document: dict[str, Any] = run_cli("stacks", *args, "--json").json()
        if document.get("fr", {}).get("divergences") or time.monotonic() > deadline:
            return document
        time.sleep(1)


def test_live_recorders_name_the_member_that_never_issued_it(job: tuple[list[int], Path]) -> None:
    pids, _ = job
    fr = _live(pids)["fr"]
    first = fr["divergences"][0]
    assert (first["kind"], first["pg"], first["seq"], first["suspects"]) == ("missing", "1", 1, [1])
    assert fr["headline"].startswith("rank 1 never issued all_reduce #1 from step (fr_job.py:")
    assert "in group 1, which rank 0 issued (waiting)" in fr["headline"]


def test_files_without_members_say_a_member_never_issued_it(job: tuple[list[int], Path]) -> None:
    _, dumps = job
    result = run_cli("fr", str(dumps), "--json")
    assert result.returncode == 14, result.stderr  # a desync, not "no desync"
    first = result.json()["divergences"][0]
    assert (first["kind"], first["pg"], first["seq"], first["suspects"]) == ("unmatched", "1", 1, [])
    text = run_cli("fr", str(dumps)).stdout
    assert "rank 0 waits in all_reduce #1 from step (fr_job.py:" in text
    assert "the member that never issued it is one of ranks 1-2" in text


def test_members_from_a_handler_are_checked_before_they_are_believed() -> None:
    dump = RankDump(rank=0, path="x", group_ranks={"0": [0, 1]})
    add_members(
        dump, {"0": [5], "1": [1, True, -2, "3", 0, 1 << 30, 1], "": [4], 7: [1], "2": "0,1", "3": []}
    )
    assert dump.group_ranks == {"0": [0, 1], "1": [0, 1]}  # named groups kept; junk, bools, strays dropped
    for hostile in (None, [1, 2], "groups", 3):
        add_members(dump, hostile)
    assert dump.group_ranks == {"0": [0, 1], "1": [0, 1]}
