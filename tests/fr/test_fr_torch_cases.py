"""Every case PyTorch's own analyzer tests (test/distributed/flight_recorder/test_fr_analysis.py),
written here as two ranks' dumps and judged by rankscope: a desync where torch finds a mismatch,
none where torch finds a match, except where docs/fr.md ("Where rankscope judges otherwise than
torch's analyzer") says why not.

The events are built the way torch's test builds them (a collective per rank, dtypes given as one
string, every number 0 in the end-to-end cases), not recorded: gloo records none of these shapes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest
from tests.support.cli import run_cli

from rankscope.fr.align import analyse
from rankscope.fr.collect import read_dumps
from rankscope.fr.render import render_text

FOUR = [[4, 4]]


def event(op: str, inputs: list[list[int]] = FOUR, outputs: list[list[int]] = FOUR, state: str = "scheduled",
          seq: int = 1, out_dtype: str = "float32", pg: tuple[str, str] = ("0", "default"),
          record: int = 0) -> dict[str, Any]:  # fmt: skip
    return {
        "record_id": record,
        "profiling_name": f"nccl:{op}",
        "state": state,
        "process_group": list(pg),
        "input_sizes": inputs,
        "output_sizes": outputs,
        "input_dtypes": "float32",
        "output_dtypes": out_dtype,
        "collective_seq_id": str(seq),
        "p2p_seq_id": "0",
        "time_created_ns": 0,
        "frames": [],
        "is_p2p": False,
    }


def judge(tmp_path: Path, rank_0: list[dict[str, Any]], rank_1: list[dict[str, Any]],
          pg_config: Optional[list[dict[str, Any]]] = None) -> tuple[Optional[str], str]:  # fmt: skip
    """(the first divergence's kind or None, the text a user reads) of two ranks' dumps."""
    for rank, entries in ((0, rank_0), (1, rank_1)):
        document: dict[str, Any] = {"version": "2.8", "entries": entries}
        if pg_config is not None:
            document["pg_config"] = pg_config[rank]
        (tmp_path / f"rank_{rank}.json").write_text(json.dumps(document))
    collected = read_dumps(tmp_path)
    report = analyse(collected.dumps, collected.unreadable, refused=collected.refused)
    kind = next((d.kind for d in report.divergences if d.kind != "no dump"), None)
    return kind, render_text(report)


E1 = event("all_reduce")

#: test_match_one_event: (name, rank 0's event, rank 1's event, torch's verdict, rankscope's kind).
PAIRS = [
    ("same all_reduce", E1, E1, "FULLY_MATCHED", None),
    ("all_reduce against all_gather", E1, event("all_gather"), "COLLECTIVE_TYPE_MISMATCH", "op"),
    ("all_to_all", event("all_to_all"), event("all_to_all"), "UNDECIDED", None),
    ("other input size", E1, event("all_reduce", [[5, 4]]), "SIZE_OR_SYNTAX_MISMATCH", "size"),
    ("other output size", E1, event("all_reduce", FOUR, [[5, 4]]), "SIZE_OR_SYNTAX_MISMATCH", "size"),
    # Both ranks record an all_reduce whose output is not its input: they agree with each other.
    ("all_reduce output unlike its input, on both", event("all_reduce", FOUR, [[5, 4]]),
     event("all_reduce", FOUR, [[5, 4]]), "SIZE_OR_SYNTAX_MISMATCH", None),
    # One rank's copy of the dump was taken after the collective finished, the other's before.
    ("scheduled against completed", E1, event("all_reduce", state="completed"), "COLLECTIVE_STATE_MISMATCH", None),
    ("other output dtype", event("all_reduce", state="completed", out_dtype="float16"),
     event("all_reduce", state="completed"), "COLLECTIVE_DTYPE_MISMATCH", "dtype"),
    ("gather: the output on the root only", event("gather", FOUR, [[4, 4], [4, 4]], "completed"),
     event("gather", FOUR, [[]], "completed", out_dtype=""), "FULLY_MATCHED", None),
    ("gather: another output on the root", event("gather", FOUR, [[4, 4], [4, 4]], "completed"),
     event("gather", FOUR, FOUR, "completed", out_dtype=""), "FULLY_MATCHED", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rank_0", "rank_1", "torch_says", "kind"), [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS]
)
def test_one_event_against_another(
    tmp_path: Path, rank_0: dict[str, Any], rank_1: dict[str, Any], torch_says: str, kind: Optional[str]
) -> None:
    found, text = judge(tmp_path, [rank_0], [rank_1])
    assert found == kind, text
    if kind is None:
        assert "no desync: ranks 0-1 issued the same collectives" in text
    else:
        assert (
            f"collective #1 of group 0 (default): different {'collectives' if kind == 'op' else kind + 's'}"
            in text
        )


#: test_all_events: every collective of torch 2.13's analyzer (types.COLLECTIVES), each matched with itself.
COLLECTIVES = [
    "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced", "_all_gather_base", "_broadcast_oop", "_reduce_oop",
    "_reduce_scatter_base", "all_gather", "all_gather_into_tensor_coalesced", "all_gather_single", "all_gather_v",
    "all_reduce", "all_reduce_barrier", "all_to_all", "all_to_all_single", "all_to_all_v_single",
    "allreduce_coalesced", "barrier", "broadcast", "gather", "new_window", "reduce", "reduce_scatter",
    "reduce_scatter_single", "reduce_scatter_tensor_coalesced", "reduce_scatter_v", "scatter", "split",
]  # fmt: skip


@pytest.mark.parametrize("op", COLLECTIVES)
def test_every_collective_matches_itself(tmp_path: Path, op: str) -> None:
    outputs = FOUR
    if op in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
        outputs = [[8]]
    if op in ("all_gather", "_all_gather_base", "all_gather_into_tensor_coalesced"):
        outputs = [[32]]
    found, text = judge(tmp_path, [event(op, FOUR, outputs)], [event(op, FOUR, outputs)])
    assert found is None, text


#: pg_config of testBuildDB: the default group of both ranks, and a one-rank group "1" on each.
CONFIG = [
    {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}, "1": {"name": "1", "desc": "sub_pg", "ranks": "[0]"}},
    {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}, "1": {"name": "1", "desc": "sub_pg", "ranks": "[1]"}},
]  # fmt: skip


def entry(record: int, op: str, inputs: list[list[int]] = FOUR, outputs: list[list[int]] = FOUR,
          pg: tuple[str, str] = ("0", "default")) -> dict[str, Any]:  # fmt: skip
    """An end-to-end case's entry: completed, numbered 0 like every entry there."""
    return event(op, inputs, outputs, "completed", 0, pg=pg, record=record)


def coalesced(op: str, sizes: list[list[list[int]]], closing: str) -> list[dict[str, Any]]:
    return [entry(i, op, s, s) for i, s in enumerate(sizes)] + [entry(len(sizes), closing, [[]], [[]])]


#: testBuildDB: (name, rank 0's entries, rank 1's entries, torch's pass_check, rankscope's kind).
BUILDS = [
    ("all_reduce, then one in each rank's own group",
     [entry(0, "all_reduce"), entry(1, "all_reduce", [[5, 5]], [[5, 5]], ("1", "sub_pg"))],
     [entry(0, "all_reduce"), entry(1, "all_reduce", [[5, 5]], [[5, 5]], ("1", "sub_pg"))], True, None),
    ("allreduce_coalesced", [entry(0, "allreduce_coalesced")], [entry(0, "allreduce_coalesced")], True, None),
    ("two broadcasts coalesced", coalesced("broadcast", [FOUR, FOUR], "coalesced"),
     coalesced("broadcast", [FOUR, FOUR], "coalesced"), True, None),
    ("uneven all-gather coalesced", coalesced("_broadcast_oop", [FOUR, [[5, 5]]], "ALLGATHER_coalesced"),
     coalesced("_broadcast_oop", [FOUR, FOUR], "ALLGATHER_coalesced"), False, "size"),
    ("reduce-scatter coalesced", coalesced("_reduce_oop", [FOUR, FOUR], "REDUCE_SCATTER_coalesced"),
     coalesced("_reduce_oop", [FOUR, FOUR], "REDUCE_SCATTER_coalesced"), True, None),
    # Rank 1 issued a coalesced reduce-scatter rank 0 never issued: one of them waits for ever.
    ("a coalesced call on rank 1 only", [entry(0, "all_reduce")],
     [entry(0, "all_reduce")] + [{**e, "record_id": e["record_id"] + 1}
                                 for e in coalesced("_reduce_oop", [FOUR, FOUR], "REDUCE_SCATTER_coalesced")],
     True, "op"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rank_0", "rank_1", "torch_passes", "kind"), [b[1:] for b in BUILDS], ids=[b[0] for b in BUILDS]
)
def test_the_end_to_end_cases(
    tmp_path: Path,
    rank_0: list[dict[str, Any]],
    rank_1: list[dict[str, Any]],
    torch_passes: bool,
    kind: Optional[str],
) -> None:
    found, text = judge(tmp_path, rank_0, rank_1, CONFIG)
    assert found == kind, text
    if kind is None:
        assert "no desync" in text


def test_the_uneven_all_gather_names_the_operation_inside_the_coalesced_call(tmp_path: Path) -> None:
    [_, _, _, uneven, *_] = BUILDS
    judge(tmp_path, uneven[1], uneven[2], CONFIG)
    result = run_cli("fr", str(tmp_path))
    assert result.returncode == 14, result.stdout
    assert (
        "collective #0 of the default group: different sizes: rank 0 issued _broadcast_oop #0 (operation 2 of 3 "
        "under #0: _broadcast_oop, _broadcast_oop, ALLGATHER_coalesced) with [5x5] float32; rank 1 issued "
        "_broadcast_oop #0 (operation 2 of 3 under #0: _broadcast_oop, _broadcast_oop, ALLGATHER_coalesced) "
        "with [4x4] float32" in result.stdout
    )
