"""Errors whose words name a set-up cause (cuBLAS's handle, a device ordinal, an architecture, the
driver, a GPU that refuses contexts, gloo's mesh) come with what to look at; others keep none. Tracebacks
written here in the form torch prints them; through `logs errors --json` and `why`."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli, run_cli_here

TRACEBACK = """\
[rank{rank}]: Traceback (most recent call last):
[rank{rank}]:   File "/job/train.py", line 33, in <module>
[rank{rank}]:     y = model(x)
[rank{rank}]: {line}
"""
CASES = [
    (
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
        "set_device",
    ),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED", "set_device"),
    ("torch.AcceleratorError: CUDA error: invalid device ordinal", "--nproc-per-node"),
    (
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "TORCH_CUDA_ARCH_LIST",
    ),
    (
        "RuntimeError: The NVIDIA driver on your system is too old. CUDA driver version is insufficient for CUDA "
        "runtime version",
        "update the driver",
    ),
    ("RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable", "exclusive-process"),
    (
        "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
        "GLOO_SOCKET_IFNAME",
    ),
]


def test_a_duplicate_gpu_in_nccl_s_last_error_says_set_device(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    tail = [
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
        "Last error:",
        "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1d000",
    ]
    line = (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, invalid usage (run with "
        "NCCL_DEBUG=WARN for details), NCCL version 2.21.5"
    )
    log.write_text(TRACEBACK.format(rank=1, line=line) + "".join(f"[rank1]: {t}\n" for t in tail))
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert verdict["next_step"].startswith("two ranks use one GPU")
    log.write_text(TRACEBACK.format(rank=1, line=line) + "[rank1]: " + tail[0] + "\n")
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert verdict["next_step"].startswith("NCCL refused how it was called")


@pytest.mark.parametrize(("line", "word"), CASES)
def test_the_error_s_words_give_its_next_step(tmp_path: Path, line: str, word: str) -> None:
    log = tmp_path / "job.log"
    log.write_text(TRACEBACK.format(rank=1, line=line))
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert verdict["what"] == line
    assert word in verdict["next_step"]


def test_another_error_has_none_and_why_repeats_the_step(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(TRACEBACK.format(rank=0, line="ValueError: bad shape"))
    assert run_cli("logs", "errors", str(log), "--json").json()["verdict"]["next_step"] == ""
    log.write_text(TRACEBACK.format(rank=0, line=CASES[0][0]))
    verdict = run_cli_here("why", "--log", str(log), "--json").json()["verdict"]
    assert "set_device" in verdict["next_step"]
