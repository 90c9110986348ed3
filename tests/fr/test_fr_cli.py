"""`rankscope fr` as a user runs it: exit codes, the not-enabled message, --ras, --json."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run_cli

DATA = Path(__file__).parent.parent / "data"
GLOO = DATA / "fr" / "gloo-torch2.13"


def test_a_desync_exits_14_and_joins_the_ras_report() -> None:
    result = run_cli("fr", str(GLOO / "size"), "--ras", str(DATA / "gpu-h100" / "ncclras_1rank.txt"))
    assert result.returncode == 14, result.stderr
    assert "rank 0 left no flight-recorder dump: look at it first" in result.stdout
    assert "NCCL RAS\n  NCCL 2.28.9: 1 node(s), 1 process(es), 1 GPU(s)" in result.stdout
    document = run_cli(
        "fr", str(GLOO / "size"), "--json", "--ras", str(DATA / "gpu-h100" / "ncclras_1rank.txt")
    ).json()
    assert document["schema"] == "rankscope.fr/1" and document["absent"] == [0]
    assert document["ras"]["communicators"][0]["status"] == "RUNNING"


def test_agreeing_ranks_exit_0_and_a_missing_rank_4(tmp_path: Path) -> None:
    # The first two collectives of the "skip" job, on which every rank agreed.
    for rank in range(3):
        raw = json.loads((GLOO / "skip" / f"rank_{rank}.json").read_text())
        raw["entries"] = [e for e in raw["entries"] if e["collective_seq_id"] <= 2]
        if rank < 2:
            (tmp_path / f"rank_{rank}.json").write_text(json.dumps(raw))
    result = run_cli("fr", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no desync: ranks 0-1 issued the same collectives (last completed #2)" in result.stdout
    missing = run_cli("fr", str(tmp_path), "--world-size", "3")
    assert missing.returncode == 4
    # the verdict says what the ranks that did dump agree on
    assert (
        "rank 2 left no flight-recorder dump: look at it first (dead, or never dumped); ranks 0-1 agree up to #2"
        in (missing.stdout)
    )


def test_an_empty_recorder_says_which_variables_to_set(tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_text(json.dumps({"version": "2.10", "entries": []}))
    result = run_cli("fr", str(tmp_path))
    assert result.returncode == 3
    assert (
        "the flight recorder was not enabled" in result.stderr
        and "TORCH_FR_BUFFER_SIZE=2000" in result.stderr
    )


def test_garbage_is_bad_input_and_nothing_is_nothing_found(tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_bytes(b"{not json")
    result = run_cli("fr", str(tmp_path))
    assert result.returncode == 8 and "no readable flight-recorder dump" in result.stderr
    nothing = run_cli("fr", str(tmp_path / "prefix_"))
    assert nothing.returncode == 3 and "no flight-recorder dumps" in nothing.stderr
