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
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "--rdzv-id"),
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


def test_cuda_error_802_in_nccl_s_last_error_names_the_node_s_fabric_manager(tmp_path: Path) -> None:
    """Every rank of an NVSwitch node fails its first collective alike when the Fabric Manager is not up."""
    line = (
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2"
    )
    tail = [
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "Last error:",
        "Cuda failure 802 'system not yet initialized'",
    ]
    log = tmp_path / "job.log"
    log.write_text(
        "".join(
            TRACEBACK.format(rank=r, line=line) + "".join(f"[rank{r}]: {t}\n" for t in tail)
            for r in (3, 0, 1)
        )
    )
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert "nvidia-fabricmanager" in verdict["next_step"], verdict
    assert verdict["ranks"] == "0-1,3", verdict


def test_another_error_has_none_and_why_repeats_the_step(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(TRACEBACK.format(rank=0, line="ValueError: bad shape"))
    assert run_cli("logs", "errors", str(log), "--json").json()["verdict"]["next_step"] == ""
    log.write_text(TRACEBACK.format(rank=0, line=CASES[0][0]))
    verdict = run_cli_here("why", "--log", str(log), "--json").json()["verdict"]
    assert "set_device" in verdict["next_step"]


CLOSED = """\
[node2] Traceback (most recent call last):
[node2]   File "/usr/bin/torchrun", line 8, in <module>
[node2]     sys.exit(main())
[node2]   File "/usr/lib/python3/dist-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 1127, in next_rendezvous
[node2]     self._op_executor.run(exit_op, deadline)
[node2] torch.distributed.elastic.rendezvous.api.RendezvousClosedError
"""


def test_a_rendezvous_another_node_closed_is_a_victim_of_that_node_s_error(tmp_path: Path) -> None:
    """Node 2's torchrun finds the rendezvous closed by node 1's, whose rank failed: rank 0's error
    is the root cause, and the closed rendezvous a consequence of it."""
    log = tmp_path / "job.log"
    log.write_text(TRACEBACK.format(rank=0, line="IndexError: index 8 is out of bounds") + CLOSED)
    document = run_cli("logs", "errors", str(log), "--json").json()
    assert document["verdict"]["what"] == "IndexError: index 8 is out of bounds"
    roles = {g["exception_type"].rsplit(".", 1)[-1]: g["role"] for g in document["groups"]}
    assert roles["RendezvousClosedError"] == "victim", roles


def test_a_real_invalid_ordinal_is_not_called_asynchronous() -> None:
    """Recorded on the H100 node: `set_device(1)` with one GPU. torch appends its "kernel errors might be
    asynchronously reported" note to every CUDA error, but a runtime call that returns the error itself
    raised it where it happened: the next step is the device count, not a synchronous rerun."""
    log = Path(__file__).parent.parent / "data" / "gpu-h100" / "invalid_ordinal_torchrun.log"
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["who"], verdict["exception"]) == ("1", "torch.AcceleratorError"), verdict
    assert "--nproc-per-node" in verdict["next_step"] and "--sync" not in verdict["next_step"], verdict
    assert "location unreliable" not in run_cli("logs", "errors", str(log)).stdout
