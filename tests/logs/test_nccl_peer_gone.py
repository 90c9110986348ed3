"""An NCCL error that may be a peer's death: torch's ``ncclSystemError`` words ("It can be also
caused by unexpected exit of a remote peer") make it a victim where another rank's error is a
culprit, and the culprit where it is alone; torch < 2.0's ``RuntimeError: NCCL error in: ...``
reads its reason on the lines after it, as a DistBackendError does. Logs written here in the
forms torch 1.x and 2.x print; through ``logs errors --json`` as a user runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from tests.support.cli import run_cli
from tests.support.torchrun_text import failure_summary

SYSTEM_1X = [
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled system "
    "error, NCCL version 2.10.3",
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. It can "
    "be also caused by unexpected exit of a remote peer, you can check NCCL warnings for failure information on "
    "this rank.",
]
SYSTEM_2X = [
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
    "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
    "It can be also caused by unexpected exit of a remote peer, you can check NCCL warnings for failure "
    "information on this rank.",
]
REMOTE_1X = [
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, unhandled cuda "
    "error, NCCL version 2.14.3",
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
]
INDEX = [
    '  File "/job/data.py", line 9, in load',
    '    raise IndexError("list index out of range")',
    "IndexError: list index out of range",
]


def _traceback(rank: int, lines: list[str]) -> list[str]:
    frames = ['  File "train.py", line 40, in <module>', "    loss = step(batch)"]
    return [f"[default{rank}]:{line}" for line in ["Traceback (most recent call last):", *frames, *lines]]


def _roles(tmp_path: Path, *tracebacks: list[str]) -> tuple[Optional[str], list[tuple[str, str, str]]]:
    log = tmp_path / "job.log"
    log.write_text("\n".join(line for tb in tracebacks for line in tb) + "\n")
    data = run_cli("logs", "errors", str(log), "--json").json()
    groups = [(g["role"], g["exception_type"], g["ranks"]) for g in data["groups"]]
    root = data["root_cause"]
    return (root["exception"] if root else None), groups


def test_a_torch_1x_system_error_is_the_victim_of_another_rank_s_error(tmp_path: Path) -> None:
    root, groups = _roles(tmp_path, _traceback(0, SYSTEM_1X), _traceback(1, INDEX))
    assert root == "IndexError: list index out of range"
    assert ("victim", "RuntimeError", "0") in groups


def test_a_torch_2x_system_error_too(tmp_path: Path) -> None:
    root, groups = _roles(tmp_path, _traceback(0, SYSTEM_2X), _traceback(3, INDEX))
    assert root == "IndexError: list index out of range"
    assert ("victim", "torch.distributed.DistBackendError", "0") in groups


def test_a_system_error_alone_is_the_root_cause(tmp_path: Path) -> None:
    root, groups = _roles(tmp_path, _traceback(0, SYSTEM_1X), _traceback(1, SYSTEM_1X))
    assert root is not None and root.startswith("RuntimeError: NCCL error in:")
    assert groups == [("culprit", "RuntimeError", "0-1")]


def test_a_torch_1x_remote_error_is_a_victim_by_its_reason_alone(tmp_path: Path) -> None:
    root, groups = _roles(tmp_path, _traceback(0, REMOTE_1X))
    assert (root, groups) == (None, [("victim", "RuntimeError", "0")])


UNPREFIXED_NCCL_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:2897, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.27.3\n"
    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
    "Last error:\n"
    "Bootstrap : no socket interface found\n\n"
    "E1104 07:12:10.430000 5531 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) "
    "local_rank: 0 (pid: 5601) of binary: /usr/bin/python\n"
) + failure_summary(0, 0, "dgx-a17", 5601, "2025-11-04_07:12:10")


def test_an_unprefixed_nccl_error_line_without_its_traceback_is_the_rank_s_error(tmp_path: Path) -> None:
    """A paste that kept torch's NCCL error line and NCCL's reason but no traceback and no rank prefix
    (a public NeMo thread's shape: NCCL_SOCKET_IFNAME matched no interface): the error, with NCCL's
    last error, is the failed rank's (it was "rank 0 exited with an error code, no traceback")."""
    log = tmp_path / "job.log"
    log.write_text(UNPREFIXED_NCCL_ERROR)
    verdict = run_cli("why", "--log", str(log), "--json").json()["verdict"]
    assert verdict["text"] == (
        "rank 0 raised torch.distributed.DistBackendError: NCCL error (invalid usage); NCCL's last error: "
        "Bootstrap : no socket interface found"
    ), verdict
