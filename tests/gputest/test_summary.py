"""Rank 0's summary and the per-rank lines: pure, from crafted rank results."""

from __future__ import annotations

from rankscope.gputest.report import (
    RankResult,
    Step,
    Summary,
    slurm_task_hosts,
    summarise,
    summary_lines,
)
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
    assert "rank 3 joined but gave no result" in text


def test_ranks_that_only_waited_for_missing_ones_are_victims_not_failures() -> None:
    waiting = RankResult(host="n1", rank=0, step=Step.ARRIVE, reason="rank 1 never reached the store")
    summary = summarise(2, "gloo", [waiting], joined=[0])
    assert summary.failed == [] and summary.waited == [0] and summary.never_joined == [1]
    assert "  rank 0 waited for them at the store" in summary_lines(summary, 5)


def test_the_summary_document_reads_back() -> None:
    summary = summarise(2, "gloo", [ok(0)], joined=[0])
    again = load_document(Summary, dump_document(summary))
    assert again.never_joined == [1] and again.results[0].device_name == "NVIDIA H100 80GB HBM3"
    assert not again.passed


def test_missing_ranks_are_named_with_their_hosts_where_known() -> None:
    # rank 3 arrived (its host is in the store), ranks 4-5 never did (hosts from the launcher's layout)
    summary = summarise(
        6, "gloo", [ok(0), ok(1), ok(2)], joined=[0, 1, 2, 3], hosts={3: "n4", 4: "n5", 5: "n6"}
    )
    assert summary.hosts == {"3": "n4", "4": "n5", "5": "n6"}
    text = "\n".join(summary_lines(summary, 5))
    assert "ranks 4-5 (on n[5-6]) never joined within 5 s" in text
    assert "rank 3 (on n4) joined but gave no result" in text
    partly = summarise(3, "gloo", [ok(0)], joined=[0], hosts={2: "n3"})
    assert "ranks 1-2 (on n3, and hosts not known) never joined" in "\n".join(summary_lines(partly, 5))
    assert "(on" not in "\n".join(summary_lines(summarise(2, "gloo", [ok(0)], joined=[0]), 5))


def expand(nodelist: str) -> list[str]:
    return {"n[1-3]": ["n1", "n2", "n3"], "a,b": ["a", "b"]}[nodelist]


def test_slurm_task_layout_gives_the_host_of_every_rank() -> None:
    srun = {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-3]",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2),1"}  # fmt: skip
    assert slurm_task_hosts(srun, expand) == {0: "n1", 1: "n1", 2: "n2", 3: "n2", 4: "n3"}
    assert slurm_task_hosts({**srun, "SLURM_DISTRIBUTION": "block:cyclic"}, expand)[4] == "n3"
    # no guess: cyclic placement, torchrun's ranks under srun, counts that do not match the nodes
    assert slurm_task_hosts({**srun, "SLURM_DISTRIBUTION": "cyclic"}, expand) == {}
    assert slurm_task_hosts({**srun, "RANK": "0", "TORCHELASTIC_RUN_ID": "x"}, expand) == {}
    assert slurm_task_hosts({**srun, "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}, expand) == {}
    assert slurm_task_hosts({**srun, "SLURM_STEP_TASKS_PER_NODE": "two"}, expand) == {}
    assert slurm_task_hosts(
        {**srun, "SLURM_STEP_NODELIST": "a,b", "SLURM_STEP_TASKS_PER_NODE": "1,1"}, expand
    ) == {0: "a", 1: "b"}
