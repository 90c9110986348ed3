"""Watchdog timeouts at different sequence numbers: the lowest is the collective some rank never
joined; the ranks past it are named as such, whichever printed first. A desync names each
collective's ranks and the user's frame it was called from. Pure functions and one run of the
command line on a log written here (a Ray actor prefix before torch's own)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.line_findings import line_findings

from rankscope.evidence import decide

WATCH = (
    "{head}[rank{rank}]:[E1118 20:22:2{rank}.95 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=8, NumelOut=8, "
    "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
)


def _log(rows: list[tuple[int, int, str]], head: str = "") -> str:
    return "".join(
        WATCH.format(head=head.format(rank=rank), rank=rank, seq=seq, op=op) for rank, seq, op in rows
    )


def _verdict(text: str) -> tuple[str, str, str]:
    verdict = decide(line_findings(text))
    assert verdict is not None
    return verdict.cause, verdict.where or "", verdict.what


def test_the_lowest_sequence_number_is_the_collective_never_joined_though_printed_later() -> None:
    cause, where, message = _verdict(
        _log([(0, 41, "ALLREDUCE"), (2, 41, "ALLREDUCE"), (1, 40, "BROADCAST"), (3, 40, "BROADCAST")])
    )
    assert (cause, where) == ("watchdog_timeout", "SeqNum=40 BROADCAST")
    assert message == (
        "collective BROADCAST (SeqNum=40) timed out on ranks 1,3: they waited for a rank that never joined "
        "it (ranks 0,2 had passed it and timed out later, at SeqNum=41)"
    )


def test_one_sequence_number_reads_as_before() -> None:
    cause, where, message = _verdict(_log([(0, 7, "ALLREDUCE"), (1, 7, "ALLREDUCE")]))
    assert (cause, where) == ("watchdog_timeout", "SeqNum=7 ALLREDUCE")
    assert message.endswith("timed out on ranks 0-1: they waited for a rank that never joined it")


def test_ray_actor_prefixes_and_the_json_document(tmp_path: Path) -> None:
    log = tmp_path / "ray.log"
    log.write_text(
        _log([(1, 2636, "ALLREDUCE"), (0, 2635, "ALLGATHER")], head="(WorkerDict pid=4182{rank}) ")
        + "(raylet) A worker died or was killed while executing a task by an unexpected system error.\n"
    )
    result = run_cli("logs", "errors", str(log), "--json")
    assert result.returncode == 0, result.stderr
    (finding,) = [f for f in json.loads(result.stdout)["findings"] if f["cause"] == "watchdog_timeout"]
    assert finding["where"] == "SeqNum=2635 ALLGATHER"
    assert "(rank 1 had passed it and timed out later, at SeqNum=2636)" in finding["what"]
    assert finding["line"] == 2


STACK = (
    "[rank{rank}]:[E1126 18:14:34.07 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective: \n"
    "#0 {call} from /venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:3068\n"
    "#1 wrapper from /venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py:83\n"
    "#2 {function} from /job/train.py:{line}\n"
    "#3 main from /job/train.py:40\n\n"
)


def test_a_desync_names_each_collective_s_ranks_and_the_user_frame_it_was_called_from() -> None:
    text = (
        _log([(0, 12, "ALLREDUCE")])
        + STACK.format(rank=0, call="all_reduce", function="log_loss", line=9)
        + _log([(2, 12, "ALLREDUCE"), (1, 12, "BROADCAST")])
        + STACK.format(rank=1, call="broadcast", function="should_stop", line=31)
    )
    cause, where, message = _verdict(text)
    assert (cause, where) == ("collective_desync", "SeqNum=12")
    assert message == (
        "ranks called different collectives at one sequence number: ALLREDUCE (8 elements) on ranks 0,2 "
        "from log_loss (train.py:9), BROADCAST (8 elements) on rank 1 from should_stop (train.py:31)"
    )


def test_a_desync_without_stacks_names_the_ranks_only() -> None:
    cause, _, message = _verdict(_log([(0, 12, "ALLREDUCE"), (1, 12, "BROADCAST")]))
    assert cause == "collective_desync"
    assert message.endswith("ALLREDUCE (8 elements) on rank 0, BROADCAST (8 elements) on rank 1")
