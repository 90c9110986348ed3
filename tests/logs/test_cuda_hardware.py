"""A CUDA error that names the GPU's hardware failing (an uncorrectable ECC or NVLink error) is told
as such: no advice to rerun with synchronous launches (no rerun finds it in the code), but where to
look on that rank's node. The fixture is tests/logs/corpus/logs/cuda_ecc_uncorrectable.log."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli_here

ECC = Path(__file__).parent / "corpus" / "logs" / "cuda_ecc_uncorrectable.log"


def _log(tmp_path: Path, exception: str) -> Path:
    path = tmp_path / "job.log"
    path.write_text(
        "[rank2]: Traceback (most recent call last):\n"
        '[rank2]:   File "/srv/train.py", line 9, in <module>\n'
        "[rank2]:     loss.backward()\n"
        f"[rank2]: {exception}\n"
        "[rank2]: CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
    )
    return path


def test_an_uncorrectable_ecc_error_points_at_the_node_not_at_a_rerun() -> None:
    text = run_cli_here("logs", "errors", str(ECC)).stdout
    assert "rerun synchronously" not in text and "CUDA_LAUNCH_BLOCKING" not in text
    assert "next: a hardware fault of this rank's GPU, not of the code" in text
    verdict = run_cli_here("why", "--log", str(ECC), "--json").json()["verdict"]
    assert verdict["ranks"] == [6] and "kernel log for NVIDIA Xid" in verdict["next_step"]


@pytest.mark.parametrize(
    ("exception", "hardware"),
    [
        ("RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution", True),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", False),
    ],
)
def test_only_the_hardware_errors_drop_the_rerun_advice(
    tmp_path: Path, exception: str, hardware: bool
) -> None:
    text = run_cli_here("logs", "errors", str(_log(tmp_path, exception))).stdout
    assert ("hardware fault of this rank's GPU" in text) is hardware
    assert ("CUDA_LAUNCH_BLOCKING=1" in text) is not hardware
