"""The comparison's verdicts and words, and the --sync warning taken from doctor's NCCL rule."""

from __future__ import annotations

import pytest

from rankscope.doctor import facts
from rankscope.doctor.facts import TorchInfo
from rankscope.gputest import rank as gputest_rank
from rankscope.logs.tracebacks import FrameLine
from rankscope.rerun.advice import sync_warnings
from rankscope.rerun.collect import Capture
from rankscope.rerun.compare import Agreement, FailurePoint, compare


def _point(file: str, line: int, function: str, unreliable: bool = False) -> FailurePoint:
    return FailurePoint("E: x", FrameLine(file, line, function), unreliable)


def test_same_place_in_another_directory_agrees() -> None:
    first = _point("/home/user/job/train.py", 6, "loss_of", unreliable=True)
    result = compare("job.log", first, _point("./train.py", 6, "loss_of"), 1)
    assert result.verdict is Agreement.SAME
    assert (
        result.text
        == "the error is raised in loss_of (line 6), where the first run reported it (its location is confirmed)"
    )


def test_different_files_are_named() -> None:
    result = compare("job.log", _point("/a/train.py", 6, "step"), _point("/b/model.py", 4, "embed"), 1)
    assert result.verdict is Agreement.DIFFERENT
    assert result.text == (
        "the error is raised in embed (model.py line 4), not in step (train.py line 6) where the first run reported it"
    )


def test_nothing_to_compare() -> None:
    assert compare("job.log", None, _point("a.py", 1, "f"), 1).verdict is Agreement.FIRST_NO_ERROR
    passed = compare("job.log", _point("a.py", 1, "f"), None, 0)
    assert passed.verdict is Agreement.RERUN_NO_ERROR
    assert "exit code 0" in passed.text


def test_capture_keeps_the_end_from_a_line_start() -> None:
    capture = Capture(limit=10)
    for _ in range(5):
        capture(b"line-abc\n")
    data = capture.data()
    assert data.startswith(b"line-abc\n") and data.endswith(b"line-abc\n")
    assert len(data) <= 20 and capture.dropped + len(data) == 45


def a_gpu_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine has no GPU: /dev/nvidia* is said to exist, as on a GPU node (a stand-in)."""
    monkeypatch.setattr(gputest_rank, "gpus_present", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize(
    ("nccl", "expected"),
    [
        ("2.14.3", "NCCL 2.14.3 hangs with CUDA_LAUNCH_BLOCKING=1 (NVIDIA/nccl#750)"),
        ("2.28.9", "CUDA_LAUNCH_BLOCKING=1 can deadlock NCCL 2.13 and later"),
    ],
)
def test_sync_warns_with_doctors_nccl_rule(monkeypatch: pytest.MonkeyPatch, nccl: str, expected: str) -> None:
    a_gpu_node(monkeypatch)
    monkeypatch.setattr(facts, "torch_from_metadata", lambda: TorchInfo("2.0.0", cuda="12.1", nccl=nccl))
    (warning,) = sync_warnings(sync=True, cpu=False)
    assert warning.startswith(expected)
    assert "unset CUDA_LAUNCH_BLOCKING for NCCL jobs" in warning
    assert sync_warnings(sync=True, cpu=True) == []


def test_no_warning_for_a_cpu_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    a_gpu_node(monkeypatch)
    monkeypatch.setattr(facts, "torch_from_metadata", lambda: TorchInfo("2.13.0+cpu"))
    assert sync_warnings(sync=True, cpu=False) == []


def test_rerun_reads_every_option_by_name() -> None:
    from rankscope.cli.params import from_params
    from rankscope.cli.rerun import RerunRequest, rerun

    argv = ["--sync", "--cpu", "--compare", "job.log", "--timeout", "5", "--json", "--", "python", "-x"]
    with rerun.make_context("rerun", argv) as ctx:
        assert from_params(RerunRequest, ctx.params) == RerunRequest(
            ("python", "-x"), sync=True, cpu=True, compare="job.log", timeout=5.0, as_json=True
        )
