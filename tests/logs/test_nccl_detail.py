"""NCCL's own reason after torch's DistBackendError (its error name and its ``Last error:`` detail)
is shown by `logs errors`: under the error, and, for the root cause, beside the verdict. The logs
are written here in the form torch and NCCL print (a `[rankN]:`-prefixed traceback under torchrun)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli_here

from rankscope.logs.collect import scan_errors
from rankscope.logs.nccl_reason import NcclReason
from rankscope.logs.reading import Reading
from rankscope.logs.sources import LogSource

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
    document = run_cli_here("logs", "errors", "--json", str(log)).json()
    assert document["verdict_nccl"] == {"name": name, "last_error": detail}
    assert document["groups"][0]["nccl"] == {"name": name, "last_error": detail}


def test_without_ncclss_lines_nothing_is_added(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(FRAMES + ERROR.format(what="unhandled system error"))
    result = run_cli_here("logs", "errors", str(log))
    assert "last error" not in result.stdout and "DistBackendError" in result.stdout
    document = run_cli_here("logs", "errors", "--json", str(log)).json()
    assert "verdict_nccl" not in document and "nccl" not in document["groups"][0]


def test_each_group_shows_its_own_example_detail() -> None:
    result = run_cli_here("logs", "errors", str(CORPUS / "nccl_ib_status12.log"))
    assert "  last error: NET/IB : Got completion from peer 10.40.2.11<48217> with status=12" in result.stdout


# A paste of the exception line and what NCCL wrote after it, without the traceback's header (the
# frames were cut, or the log was grepped for the error): torch's `[rankN]:` marker on each line.
PASTE = """\
[rank10]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/\
ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
[rank10]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
[rank11]: step 4812 loss 2.3108
[rank10]: Last error:
[rank10]: socketStartConnect: Connect to 10.20.0.15<48113> failed : Software caused connection abort
"""
SOCKET = "socketStartConnect: Connect to 10.20.0.15<48113> failed : Software caused connection abort"


def test_an_exception_line_without_its_traceback_keeps_nccls_reason(tmp_path: Path) -> None:
    log = tmp_path / "paste.log"
    log.write_text("[rank10]: step 4812 loss 2.3094\n" + PASTE)
    result = run_cli_here("logs", "errors", str(log))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("root cause: rank 10: torch.distributed.DistBackendError: NCCL error in:")
    assert lines[1].startswith("  why: an exception line of this rank") and lines[1].endswith("line 2")
    assert lines[2:4] == [
        "  NCCL's error: ncclSystemError: System call (e.g. socket, malloc) or external library call "
        "failed or device error.",
        f"  NCCL's last error: {SOCKET}",
    ]


def test_an_exception_lines_detail_on_its_last_error_line(tmp_path: Path) -> None:
    log = tmp_path / "paste.log"
    log.write_text(
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1691, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n"
        "[rank3]: ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "[rank3]: Last error: Cuda failure 'out of memory'\n"
    )
    lines = run_cli_here("logs", "errors", str(log)).stdout.splitlines()
    assert lines[2:4] == [
        "  NCCL's error: ncclUnhandledCudaError: Call to CUDA function failed.",
        "  NCCL's last error: Cuda failure 'out of memory'",
    ]


def test_an_exception_line_whose_nccl_reason_names_a_lost_peer_is_a_victim(tmp_path: Path) -> None:
    """As for a traceback: NCCL's last error says the peer went away, so rank 3 failed because of
    another rank; the root cause is rank 10's, although rank 3 wrote first."""
    log = tmp_path / "paste.log"
    log.write_text(
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "[rank3]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
        "[rank3]: Last error:\n"
        "[rank3]: socketProgressOpt: Call to recv from 10.20.0.16<51234> failed : Connection reset by peer\n"
        + PASTE
    )
    result = run_cli_here("logs", "errors", str(log))
    assert result.stdout.startswith("root cause: rank 10: torch.distributed.DistBackendError"), result.stdout


def test_nccls_error_name_in_a_tracebacks_message_is_no_finding_of_its_own(tmp_path: Path) -> None:
    """The `ncclSystemError: ...` line continues the traceback's message: the traceback holds it."""
    log = tmp_path / "job.log"
    log.write_text(
        FRAMES.replace("[rank1]", "[rank10]") + PASTE.replace("[rank11]: step 4812 loss 2.3108\n", "")
    )
    result = run_cli_here("logs", "errors", str(log), "--json")
    whats = [f["what"] for f in result.json()["findings"]]
    assert len(whats) == 1 and whats[0].startswith("torch.distributed.DistBackendError"), whats


@pytest.mark.parametrize("chunk_size", [64, 100, 160, 230, 300, 1 << 20])
def test_nccls_reason_is_kept_whatever_block_the_lines_after_the_error_fall_in(
    tmp_path: Path, chunk_size: int
) -> None:
    """Blocks this small put a boundary between the exception line and each line NCCL wrote after
    it: the reason read on into the next block is the same."""
    log = tmp_path / "paste.log"
    log.write_text("[rank10]: step 4812 loss 2.3094\n" + PASTE + "[rank11]: step 4813 loss 2.3101\n")
    _report, counts = scan_errors(Reading([LogSource(str(log), log)], chunk_size=chunk_size))
    name = (
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error."
    )
    assert counts.nccl_reasons == {(str(log), 2): NcclReason(name, SOCKET)}
    assert counts.verdict is not None and (counts.verdict.line, counts.verdict.role) == (2, "culprit")
