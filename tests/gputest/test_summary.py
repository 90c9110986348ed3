"""Rank 0's summary and the per-rank lines: pure, from crafted rank results."""

from __future__ import annotations

from rankscope.gputest.report import SCHEMA, RankResult, Step, Summary, summarise, summary_lines
from rankscope.serial import dump_document, load_document


def ok(rank: int) -> RankResult:
    return RankResult(
        host="n1",
        rank=rank,
        step=Step.OK,
        backend="nccl",
        device="cuda:0",
        device_name="NVIDIA H100 80GB HBM3",
        capability="9.0",
        torch="2.11.0",
        cuda="13.0",
        nccl="2.28.9",
        cpus="0-15",
        numa="0",
        elapsed=1.5,
    )


def test_an_ok_line_has_device_capability_versions_and_affinity() -> None:
    line = ok(3).line()
    assert line.startswith("[n1:3] OK nccl cuda:0 NVIDIA H100 80GB HBM3 (sm 9.0)")
    assert "torch 2.11.0, CUDA 13.0, NCCL 2.28.9" in line and "cpus 0-15, numa 0" in line


def test_all_ok() -> None:
    summary = summarise(2, "nccl", [ok(0), ok(1)], joined=[0, 1])
    assert summary.passed
    assert summary_lines(summary, 60) == [
        "gpu-test: all 2 ranks OK (nccl: init, all_reduce checked, barrier)"
    ]


def test_failed_never_joined_and_silent_ranks_are_told_apart() -> None:
    bad = RankResult(host="n2", rank=2, step=Step.CHECK, reason="wrong sum", fix="run --isolate")
    summary = summarise(6, "gloo", [ok(0), ok(1), bad], joined=[0, 1, 2, 3])
    assert [r.rank for r in summary.failed] == [2]
    assert summary.no_result == [3]
    assert summary.never_joined == [4, 5]
    text = "\n".join(summary_lines(summary, 5))
    assert "2 of 6 ranks OK" in text
    assert "rank 2 (n2:2) failed at check: wrong sum" in text and "fix: run --isolate" in text
    assert "ranks 4-5 never joined within 5 s" in text
    assert "ranks 3 joined but gave no result" in text


def test_ranks_that_only_waited_for_missing_ones_are_victims_not_failures() -> None:
    waiting = RankResult(host="n1", rank=0, step=Step.ARRIVE, reason="ranks 1 never reached the store")
    summary = summarise(2, "gloo", [waiting], joined=[0])
    assert summary.failed == [] and summary.waited == [0] and summary.never_joined == [1]
    assert "  ranks 0 waited for them at the store" in summary_lines(summary, 5)


def test_the_summary_document_reads_back() -> None:
    summary = summarise(2, "gloo", [ok(0)], joined=[0])
    again = load_document(Summary, dump_document(SCHEMA, summary), SCHEMA)
    assert again.never_joined == [1] and again.results[0].device_name == "NVIDIA H100 80GB HBM3"
    assert not again.passed
