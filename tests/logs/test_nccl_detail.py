"""NCCL's own reason after torch's DistBackendError (its error name and its ``Last error:`` detail)
is shown by `logs errors`: under the error, and, for the root cause, beside the verdict. The logs
are written here in the form torch and NCCL print (a `[rankN]:`-prefixed traceback under torchrun)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli_here

CORPUS = Path(__file__).parent / "corpus" / "logs"

FRAMES = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/workspace/train.py", line 61, in main
[rank1]:     model = DDP(model, device_ids=[local_rank])
[rank1]:   File "/usr/lib/python3/dist-packages/torch/distributed/utils.py", line 288, in _verify_param_shape_across_processes
[rank1]:     return dist._verify_params_across_processes(process_group, tensors, logger)
"""
ERROR = (
    "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1970, {what}, NCCL version 2.20.5\n"
)


@pytest.mark.parametrize(
    ("tail", "name", "detail"),
    [
        (
            "[rank1]: ncclInternalError: Internal check failed.\n[rank1]: Last error:\n"
            "[rank1]: Attribute busid of node nic not found\n",
            "ncclInternalError: Internal check failed.",
            "Attribute busid of node nic not found",
        ),
        (  # the detail on the "Last error:" line itself
            "[rank1]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
            "[rank1]: Last error: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000\n",
            "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
            "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000",
        ),
    ],
)
def test_nccls_last_error_is_shown_with_the_root_cause(
    tmp_path: Path, tail: str, name: str, detail: str
) -> None:
    log = tmp_path / "job.log"
    log.write_text(FRAMES + ERROR.format(what="internal error") + tail)
    result = run_cli_here("logs", "errors", str(log))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("root cause: rank 1: torch.distributed.DistBackendError: NCCL error in:")
    assert f"  NCCL's last error: {detail}" in lines[:4]  # beside the verdict
    at = lines.index(f"  {name}")  # under the error, right after its exception line
    assert (
        lines[at - 1].startswith("  torch.distributed.DistBackendError")
        and lines[at + 1] == f"  last error: {detail}"
    )


def test_without_ncclss_lines_nothing_is_added(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(FRAMES + ERROR.format(what="unhandled system error"))
    result = run_cli_here("logs", "errors", str(log))
    assert "last error" not in result.stdout and "DistBackendError" in result.stdout


def test_each_group_shows_its_own_example_detail() -> None:
    result = run_cli_here("logs", "errors", str(CORPUS / "nccl_ib_status12.log"))
    assert "  last error: NET/IB : Got completion from peer 10.40.2.11<48217> with status=12" in result.stdout
