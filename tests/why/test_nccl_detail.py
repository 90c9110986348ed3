"""`why --log` carries NCCL's own reason for a DistBackendError (its error name and its `Last
error:` detail) into the verdict's evidence, as `logs errors` shows it: for a whole traceback and
for an exception line pasted without its traceback's header. The logs are written here in the form
torch and NCCL print under torchrun (each line with torch's `[rankN]:` marker); no job is needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import run_cli_here

BEFORE = "[rank0]: step 4812 loss 2.3094\n[rank10]: step 4812 loss 2.3108\n"
FRAMES = """\
[rank10]: Traceback (most recent call last):
[rank10]:   File "/workspace/train.py", line 61, in main
[rank10]:     model = DDP(model, device_ids=[local_rank])
[rank10]:   File "/usr/lib/python3/dist-packages/torch/nn/parallel/distributed.py", line 825, in __init__
[rank10]:     _verify_param_shape_across_processes(self.process_group, parameters)
"""
ERROR = """\
[rank10]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/\
ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
[rank10]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
[rank10]: Last error:
[rank10]: socketStartConnect: Connect to 10.20.0.15<48113> failed : Software caused connection abort
"""
NAME = (
    "NCCL's error: ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
    "or device error."
)
LAST = "NCCL's last error: socketStartConnect: Connect to 10.20.0.15<48113> failed : Software caused connection abort"
#: The fields of an evidence line and of a finding in the schema (docs/why.md): nothing is added.
EVIDENCE_FIELDS = {"source", "text"}
FINDING_FIELDS = {
    "kind", "cause", "role", "who", "what", "where", "source", "line", "order", "global_rank", "time",
    "exception", "ranks", "next_step", "local", "superseded",
}  # fmt: skip


def _why(log: Path) -> tuple[dict[str, Any], str]:
    document = run_cli_here("why", "--log", str(log), "--json")
    text = run_cli_here("why", "--log", str(log))
    assert document.returncode == 15, document.stdout + document.stderr
    return document.json(), text.stdout


@pytest.mark.parametrize(
    ("form", "log_text"), [("traceback", BEFORE + FRAMES + ERROR), ("paste", BEFORE + ERROR)]
)
def test_the_verdict_carries_nccls_error_and_last_error(tmp_path: Path, form: str, log_text: str) -> None:
    log = tmp_path / "job.log"
    log.write_text(log_text)
    document, text = _why(log)
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("python_exception", [10])
    evidence = verdict["evidence"]
    texts = [e["text"] for e in evidence]
    first = texts.index(next(t for t in texts if t.startswith("torch.distributed.DistBackendError")))
    # right after the error they explain, from the same place in the log
    assert texts[first + 1 : first + 3] == [NAME, LAST], texts
    assert evidence[first + 1]["source"] == evidence[first + 2]["source"] == f"{log}:3"
    # once: the error name's own line is not a second piece of evidence
    assert not any(t.startswith("ncclSystemError") for t in texts), texts
    assert all(set(e) == EVIDENCE_FIELDS for e in evidence)
    assert all(set(f) <= FINDING_FIELDS for f in document["findings"])
    verdict_text = text.split("\nSignals\n")[0]
    assert f"{log}:3  {LAST}" in verdict_text and f"{log}:3  {NAME}" in verdict_text, text
    # the verdict's own sentence says what failed, not torch's file and line
    assert verdict["text"] == (
        "rank 10 raised torch.distributed.DistBackendError: NCCL error (unhandled system error); " + LAST
    )


def test_the_verdicts_sentence_reads_nccls_later_wording_too(tmp_path: Path) -> None:
    """NCCL 2.28 under torch 2.11 asks for NCCL_DEBUG=WARN (a real H100 run's words)."""
    log = tmp_path / "job.log"
    log.write_text(BEFORE + ERROR.replace("NCCL_DEBUG=INFO", "NCCL_DEBUG=WARN"))
    document, _ = _why(log)
    assert document["verdict"]["text"] == (
        "rank 10 raised torch.distributed.DistBackendError: NCCL error (unhandled system error); " + LAST
    )


def test_without_nccls_lines_the_evidence_is_the_error_alone(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(BEFORE + ERROR.split("[rank10]: ncclSystemError")[0])
    document, text = _why(log)
    assert [e["text"][:34] for e in document["verdict"]["evidence"]] == ["torch.distributed.DistBackendError"]
    assert "NCCL's" not in text
    assert document["verdict"]["text"].startswith(
        "rank 10 raised torch.distributed.DistBackendError: NCCL error in: "
    )


def test_a_supporting_error_brings_nccls_reason_with_it(tmp_path: Path) -> None:
    """NCCL's own WARN of rank 10 is the verdict (an NCCL call of that process failed); the rank's
    DistBackendError supports it, NCCL's reason right after it."""
    log = tmp_path / "job.log"
    log.write_text(
        BEFORE
        + "[rank10]: node017:48211:48590 [2] include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'\n"
        + FRAMES
        + ERROR.replace("unhandled system error", "unhandled cuda error")
        .replace(
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
            "ncclUnhandledCudaError: Call to CUDA function failed.",
        )
        .replace(
            "socketStartConnect: Connect to 10.20.0.15<48113> failed : Software caused connection abort",
            "Cuda failure 'out of memory'",
        )
    )
    document, _text = _why(log)
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("nccl:cuda_oom", [10])
    texts = [e["text"] for e in verdict["evidence"]]
    at = next(i for i, t in enumerate(texts) if t.startswith("torch.distributed.DistBackendError"))
    assert texts[at + 1 : at + 3] == [
        "NCCL's error: ncclUnhandledCudaError: Call to CUDA function failed.",
        "NCCL's last error: Cuda failure 'out of memory'",
    ], texts
