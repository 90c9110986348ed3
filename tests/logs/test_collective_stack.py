"""The place of a watchdog timeout is the user's own frame of torch's stack of the failed collective.

The recorded log is a real H100 run (tests/data/gpu-h100/nccl_timeout.log: torch 2.11, one rank, an
all_reduce queued behind a kernel that never ends); the other logs are written here in the form
torch prints (a launcher prefix on every line, torch's ``[rankN]:`` marker on the header only). No
GPU is mocked: these read files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest
from tests.support.cli import run_cli, run_cli_here

from rankscope.evidence import Finding, decide
from rankscope.logs.line_evidence import LineEvidence
from rankscope.logs.prefixes import SourceLabels

RECORDED = Path(__file__).resolve().parents[1] / "data" / "gpu-h100" / "nccl_timeout.log"
PLACE = "log_global_loss (nccl_timeout.py:9)"

WATCH = (
    "{p}[rank{r}]:[E1126 18:14:29.947 ProcessGroupNCCL.cpp:689] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
    "Timeout(ms)=25000) ran for 25005 milliseconds before timing out.\n"
)
HEADER = "{p}[rank{r}]:[E1126 18:14:34.069 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective: \n"
TORCH_FRAMES = (
    "{p}#0 all_reduce from /venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:3068\n"
    "{p}#1 wrapper from /venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py:83\n"
)
USER_FRAMES = (
    "{p}#2 log_global_loss from /home/user/job/nccl_timeout.py:9\n"
    "{p}#3 main from /home/user/job/nccl_timeout.py:21\n"
    "{p}#4 <module> from /home/user/job/nccl_timeout.py:26\n"
    "{p}\n"
)
AFTER = (
    "{p}[rank{r}]:[E1126 18:14:34.070 ProcessGroupNCCL.cpp:2636] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
    "First PG on this rank to signal dumping.\n"
)


def _log(prefix: str = "", rank: int = 0, frames: str = TORCH_FRAMES + USER_FRAMES) -> str:
    return "".join(part.format(p=prefix, r=rank) for part in (WATCH, HEADER, frames, AFTER))


def _verdict(*blocks: str) -> Finding:
    """The verdict of the evidence reader fed these blocks of whole lines, one after another (srun's
    ``N: `` labels read, as where the reader finds most lines carry them)."""
    found = LineEvidence()
    found.start_source("job.log", SourceLabels(allow_srun=blocks[0].startswith("0: ")))
    for block in blocks:
        data = block.encode()
        found.feed(data, data.count(b"\n"))
    verdict = decide(found.findings(set()))
    assert verdict is not None
    return verdict


def test_why_names_the_user_frame_of_the_recorded_h100_timeout() -> None:
    text = run_cli("why", "--log", str(RECORDED))
    assert text.returncode == 15, text.stdout + text.stderr
    verdict = text.stdout.split("\nSignals\n")[0]
    assert f"  where: {PLACE}\n" in verdict, text.stdout
    # the collective and its sequence number stay in the finding's own words
    assert "collective ALLREDUCE (SeqNum=4) timed out on rank 0" in verdict, text.stdout
    document: dict[str, Any] = run_cli_here("why", "--log", str(RECORDED), "--json").json()
    assert document["verdict"]["location"] == PLACE
    (finding,) = [f for f in document["findings"] if f["cause"] == "watchdog_timeout"]
    assert finding["where"] == PLACE


def test_logs_errors_shows_the_place_of_the_recorded_h100_timeout() -> None:
    text = run_cli_here("logs", "errors", str(RECORDED))
    assert text.returncode == 0, text.stderr
    head = text.stdout.splitlines()[0]
    assert head == (
        "root cause: rank 0: collective ALLREDUCE (SeqNum=4) timed out on rank 0: they waited for a rank "
        f"that never joined it at {PLACE} [watchdog_timeout]"
    )
    verdict = run_cli_here("logs", "errors", str(RECORDED), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["where"], verdict["line"]) == ("watchdog_timeout", PLACE, 2)


@pytest.mark.parametrize(
    "prefix",
    ["", "[gpu-a1:0]:", "0: "],
    ids=["torch-marker-on-header-only", "torchrun-tee-role", "srun-label"],
)
def test_the_place_is_read_under_each_launcher_prefix(prefix: str) -> None:
    assert _verdict(_log(prefix)).where == PLACE


def test_a_log_without_torch_s_rank_marker_gives_the_place_to_the_rank_torch_names() -> None:
    # one process run without a launcher's help: no [rankN]: marker, torch's [Rank 0] in the text
    text = _log().replace("[rank0]:", "")
    verdict = _verdict(text)
    assert (verdict.ranks, verdict.where) == ("0", PLACE)


def test_frames_that_carry_torch_s_marker_too_are_read() -> None:
    frames = (TORCH_FRAMES + USER_FRAMES).replace("{p}", "{p}[rank{r}]:")
    assert _verdict(_log("[gpu-a1:0]:", frames=frames)).where == PLACE


def test_a_stack_split_across_the_reader_s_blocks_is_read_whole_wherever_it_is_cut() -> None:
    lines = _log("[gpu-a1:0]:").splitlines(keepends=True)
    for cut in range(1, len(lines)):
        head, tail = "".join(lines[:cut]), "".join(lines[cut:])
        assert _verdict(head, tail).where == PLACE, cut


def test_a_stack_cut_by_the_end_of_the_paste_keeps_the_frames_it_has() -> None:
    text = _log()
    cut = text[: text.index("#3 main")]
    assert _verdict(cut).where == PLACE
    # cut before the user's frame: nothing of the user's was printed, the collective stays the place
    before = text[: text.index("#2 log_global_loss")]
    assert _verdict(before).where == "SeqNum=4 ALLREDUCE"


def test_a_stack_of_torch_frames_only_keeps_the_collective_as_the_place() -> None:
    verdict = _verdict(_log(frames=TORCH_FRAMES + "\n"))
    assert (verdict.cause, verdict.where) == ("watchdog_timeout", "SeqNum=4 ALLREDUCE")
    assert "ALLREDUCE (SeqNum=4)" in verdict.what


def test_torch_s_not_found_line_has_no_stack() -> None:
    text = _log(frames="").replace(
        "Stack trace of the failed collective: ",
        "Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. "
        "You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",
    )
    assert _verdict(text).where == "SeqNum=4 ALLREDUCE"


def _two_ranks(first_frames: Optional[str]) -> str:
    """Two ranks under torchrun --tee: rank 0 times out first; rank 1's stack (elsewhere in the
    user's code) is printed first, and the two stacks' lines interleave."""
    p0, p1 = "[gpu-a1:0]:", "[gpu-a1:1]:"
    other = (
        f"{p1}#0 all_reduce from /venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:3068\n"
        f"{p1}#1 reduce_metrics from /home/user/job/eval.py:57\n"
    )
    mine = [] if first_frames is None else first_frames.format(p=p0, r=0).splitlines(keepends=True)
    theirs = other.splitlines(keepends=True) + [f"{p1}\n"]
    lines = [WATCH.format(p=p0, r=0), WATCH.format(p=p1, r=1), HEADER.format(p=p1, r=1)]
    if first_frames is not None:
        lines.append(HEADER.format(p=p0, r=0))
    while mine or theirs:  # one line of each in turn
        lines.extend(stack.pop(0) for stack in (theirs, mine) if stack)
    return "".join(lines)


def test_several_ranks_stacks_the_first_rank_s_frame_is_the_place() -> None:
    verdict = _verdict(_two_ranks(TORCH_FRAMES + USER_FRAMES))
    assert (verdict.cause, verdict.ranks, verdict.where) == ("watchdog_timeout", "0-1", PLACE)


def test_without_a_stack_of_the_first_rank_another_rank_s_frame_is_the_place() -> None:
    verdict = _verdict(_two_ranks(None))
    assert (verdict.ranks, verdict.where) == ("0-1", "reduce_metrics (eval.py:57)")


# -- `logs nccl`: its watchdog finding says where the collectives were called from -----------------


def test_logs_nccl_names_the_user_frame_of_the_recorded_timeout() -> None:
    data = run_cli("logs", "nccl", str(RECORDED), "--json").json()
    (found,) = [f for f in data["findings"] if f["kind"] == "watchdog_timeout"]
    assert found["message"].endswith(f"ALLREDUCE SeqNum=4 (called from {PLACE})")


@pytest.mark.parametrize("prefix", ["", "[default1]:", "1: "])
def test_logs_nccl_names_each_distinct_frame_of_ranks_behind_a_prefix(tmp_path: Path, prefix: str) -> None:
    other = USER_FRAMES.replace("log_global_loss", "should_stop").replace(":9", ":31")
    log = tmp_path / "job.log"
    log.write_text(
        _log(prefix.replace("1", "0"), 0)
        + _log(prefix, 1, TORCH_FRAMES + other)
        + _log(prefix.replace("1", "2"), 2)
    )
    data = run_cli("logs", "nccl", str(log), "--json").json()
    (found,) = [f for f in data["findings"] if f["kind"] == "watchdog_timeout"]
    assert found["message"].endswith(f"(called from {PLACE}; should_stop (nccl_timeout.py:31))"), found


def test_logs_nccl_without_a_stack_says_nothing_of_a_place(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(WATCH.format(p="", r=0) + AFTER.format(p="", r=0))
    data = run_cli("logs", "nccl", str(log), "--json").json()
    (found,) = [f for f in data["findings"] if f["kind"] == "watchdog_timeout"]
    assert "called from" not in found["message"]
