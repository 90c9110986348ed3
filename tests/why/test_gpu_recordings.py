"""`why --log` on failures recorded on an H100 (tests/data/gpu-h100/; no GPU here).

An asynchronous CUDA error: rank 1 indexes a table out of range in ``embed()``; CUDA reports it later,
in ``loss_of()``. The verdict says that the line is where CUDA noticed it, that a synchronous rerun
finds the launch, and cites what the kernel asserted: with torchrun's ``--tee`` prefixes
(cuda_assert.log) and in torchrun's plain output, whose assertion lines carry no rank prefix
(cuda_assert_plain.log).

A one-rank NCCL job whose all_reduce never ran (queued behind a kernel that never ends): the watchdog
timed it out, and its dump shows the rank is the whole job, so no missing rank is blamed. The same
job under torchrun (nccl_timeout_torchrun.log) did not abort after the timeout: the log ends two
minutes later with torchrun's own SIGTERM traceback, which is the weaker hypothesis, not the cause."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli_here

DATA = Path(__file__).parents[1] / "data" / "gpu-h100"
KERNEL = (
    "IndexKernelUtils.cu:16 in vectorized_gather_kernel: `ind >=0 && ind < ind_dim_size && "
    '"vectorized gather kernel index out of bounds"` failed'
)


@pytest.mark.parametrize(("name", "line"), [("cuda_assert.log", 6), ("cuda_assert_plain.log", 11)])
def test_an_asynchronous_cuda_error_sends_to_a_synchronous_rerun_and_cites_the_assertion(
    name: str, line: int
) -> None:
    log = DATA / name
    result = run_cli_here("why", "--log", str(log), "--json")
    assert result.returncode == 15, result.stdout + result.stderr
    verdict = result.json()["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("python_exception", [1])
    assert verdict["location"] == f"loss_of (cuda_assert.py:{line})"
    assert "asynchronously" in verdict["next_step"] and "rankscope rerun --sync" in verdict["next_step"]
    cited = [e for e in verdict["evidence"] if "device-side assertion, 32 GPU thread(s)" in e["text"]]
    assert len(cited) == 1 and KERNEL in cited[0]["text"], verdict["evidence"]
    assert cited[0]["source"] == f"{log}:37"  # beside the error it explains


def test_logs_errors_says_the_rerun_once() -> None:
    text = run_cli_here("logs", "errors", str(DATA / "cuda_assert.log")).stdout
    root = text.split("\n\n")[0]
    assert root.count("CUDA_LAUNCH_BLOCKING=1") == 1 and "next:" not in root, root


def test_a_one_rank_jobs_timeout_is_the_rank_itself_not_a_missing_rank(tmp_path: Path) -> None:
    args = ("why", "--log", str(DATA / "nccl_timeout.log"), "--fr", str(DATA / "fr_nccl_timeout_rank_0"))
    result = run_cli_here(*args, "--json")
    assert result.returncode == 15, result.stdout + result.stderr
    document = result.json()
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("collective_unfinished", [0])
    assert verdict["location"] == "log_global_loss (nccl_timeout.py:9)"
    assert (
        verdict["text"]
        == "rank 0 never completed its collective, with no other rank to wait for (a one-rank job)"
    )
    assert "stacks --native" in verdict["next_step"]
    texts = [e["text"] for e in verdict["evidence"]]
    assert (
        "collective ALLREDUCE (SeqNum=4) timed out on rank 0: no other rank to wait for (a one-rank job)"
        in texts
    )
    assert not any("never joined" in t for t in texts), texts
    # a kept bundle weighs the same
    bundle = tmp_path / "bundle"
    assert run_cli_here(*args, "--out", str(bundle)).returncode == 15
    again = run_cli_here("why", "--from", str(bundle), "--json").json()["verdict"]
    assert again["cause"] == "collective_unfinished"


def test_torchrun_stopped_after_a_watchdog_timeout_keeps_the_timeout_as_the_cause() -> None:
    log = DATA / "nccl_timeout_torchrun.log"
    result = run_cli_here("why", "--log", str(log), "--json")
    assert result.returncode == 15, result.stdout + result.stderr
    document = result.json()
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("watchdog_timeout", [0])
    assert verdict["location"] == "log_global_loss (nccl_stuck.py:8)"
    assert [h["cause"] for h in document["hypotheses"]] == ["stopped_from_outside"]
    errors = run_cli_here("logs", "errors", str(log)).stdout
    assert errors.startswith("root cause: rank 0: collective ALLREDUCE (SeqNum=4) timed out on rank 0"), (
        errors
    )
