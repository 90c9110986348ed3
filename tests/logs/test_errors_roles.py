"""`logs errors` names the root cause: roles of errors, CUDA facts, on recorded, generated and real logs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import run_cli

from rankscope.logs.cuda import OutOfMemory, out_of_memory
from rankscope.logs.roles import Role, role_of
from rankscope.logs.tracebacks import HANDLED_LINES, RankTraceback

GPU = Path(__file__).parents[1] / "data" / "gpu-h100"
BENCH = Path(__file__).parents[2] / "bench"


def _errors(*paths: Path) -> dict[str, Any]:
    result = run_cli("logs", "errors", *map(str, paths), "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = result.json()
    return data


def _roles(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(g["role"], g["exception_type"], g["ranks"]) for g in data["groups"]]


# ----------------------------------------------------------------------------- recorded on an H100


def test_async_cuda_error_is_the_root_cause_and_its_location_is_flagged() -> None:
    log = GPU / "cuda_assert.log"
    data = _errors(log)
    assert _roles(data) == [
        ("culprit", "torch.AcceleratorError", "gpu0:1"),
        ("victim", "RuntimeError", "gpu0:0"),  # gloo: Connection closed by peer
    ]
    root = data["root_cause"]
    assert (root["group"], root["label"], root["global_rank"]) == (0, "gpu0:1", 1)
    assert root["exception"] == "torch.AcceleratorError: CUDA error: device-side assert triggered"
    assert (root["where"], root["function"]) == ("/home/user/job/cuda_assert.py:6", "loss_of")
    assert root["chosen_by"] == "log order"
    assert root["location_unreliable"] is True
    assert root["rerun"] == "CUDA_LAUNCH_BLOCKING=1 torchrun ... /home/user/job/cuda_assert.py ..."
    assert data["groups"][0]["cuda_async"] is True and data["groups"][1]["cuda_async"] is False
    [folded] = data["device_asserts"]
    assert folded["file"] == "/pytorch/aten/src/ATen/native/cuda/IndexKernelUtils.cu"
    assert (folded["line"], folded["kernel"], folded["threads"], folded["ranks"]) == (
        16,
        "vectorized_gather_kernel",
        32,
        "gpu0:1",
    )
    assert folded["condition"].startswith("ind >=0 && ind < ind_dim_size")
    assert [g["role"] for g in data["unprefixed_groups"]] == ["victim"]  # torchrun's ChildFailedError

    text = run_cli("logs", "errors", str(log)).stdout.splitlines()
    assert text[0] == (
        "root cause: gpu0:1: torch.AcceleratorError: CUDA error: device-side assert triggered "
        "at /home/user/job/cuda_assert.py:6 in loss_of — the first fatal error in log order"
    )
    assert text[2].startswith("  location unreliable: CUDA reported this kernel error asynchronously")
    assert text[2].endswith("CUDA_LAUNCH_BLOCKING=1 torchrun ... /home/user/job/cuda_assert.py ...")
    assert text[3].startswith(
        "  device-side assertion, 32 GPU thread(s) on 1 rank(s) gpu0:1: "
        "/pytorch/aten/src/ATen/native/cuda/IndexKernelUtils.cu:16 in vectorized_gather_kernel: `ind >=0"
    )
    assert any(line.startswith("error 2 of 2 — victim") and line.endswith("gpu0:0") for line in text)


def test_out_of_memory_numbers_are_in_the_summary() -> None:
    log = GPU / "oom.log"
    data = _errors(log)
    assert _roles(data) == [
        ("culprit", "torch.OutOfMemoryError", "gpu0:1"),
        ("victim", "RuntimeError", "gpu0:0"),
    ]
    assert data["groups"][0]["out_of_memory"] == {
        "asked": "400.00 GiB",
        "gpu": 0,
        "capacity": "79.18 GiB",
        "free": "78.15 GiB",
        "process_in_use": "518.00 MiB",
        "allocated": "0 bytes",
        "reserved_unallocated": "0 bytes",
        "reserved": None,
    }
    assert data["root_cause"]["where"] == "/home/user/job/oom.py:4"
    first = run_cli("logs", "errors", str(log)).stdout.splitlines()[0]
    assert first.startswith(
        "root cause: gpu0:1: torch.OutOfMemoryError: CUDA out of memory (asked 400.00 GiB on GPU 0, "
        "capacity 79.18 GiB, free 78.15 GiB; PyTorch allocated 0 bytes, reserved but unallocated 0 bytes"
    )
    assert "the request alone is larger than the whole GPU" in first


def test_an_error_every_rank_raises_itself_is_no_victim() -> None:
    """Two ranks on one GPU: NCCL's "invalid usage" is each rank's own error, not a lost peer."""
    data = _errors(GPU / "nccl_dup.log")
    assert _roles(data) == [("culprit", "torch.distributed.DistBackendError", "gpu0:[0-1]")]
    assert data["root_cause"]["label"] == "gpu0:0"


def test_out_of_memory_before_torch_2_1() -> None:
    tb = RankTraceback(label=None, source="x", order=1, line_number=1)
    tb.exception = (
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.90 GiB total capacity; "
        "14.87 GiB already allocated; 11.75 MiB free; 15.07 GiB reserved in total by PyTorch)"
    )
    assert out_of_memory(tb) == OutOfMemory(
        asked="20.00 MiB",
        gpu=0,
        capacity="15.90 GiB",
        free="11.75 MiB",
        allocated="14.87 GiB",
        reserved="15.07 GiB",
    )


@pytest.mark.parametrize(
    ("exception", "role"),
    [
        ("RuntimeError: [pair.cc:534] Connection closed by peer [10.0.0.1]:4000", Role.VICTIM),
        ("RuntimeError: [pair.cc:589] Read error [10.0.0.1]:4000: Connection reset by peer", Role.VICTIM),
        (
            "RuntimeError: [unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
            Role.VICTIM,
        ),
        ("torch.distributed.DistBackendError: NCCL communicator was aborted on rank 3.", Role.VICTIM),
        ("torch.distributed.DistStoreError: Socket Timeout", Role.VICTIM),
        (
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15",
            Role.VICTIM,
        ),
        (
            "RuntimeError: Worker failed with error 'expert id out of range', please check the stack trace "
            "above for the root cause",
            Role.VICTIM,
        ),
        (
            "torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([1, 3])",
            Role.VICTIM,
        ),
        ("ValueError: label 1000 out of range", Role.CULPRIT),
        ("RuntimeError: Worker failed with error 'x'", Role.CULPRIT),
        ("torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:93, invalid usage", Role.CULPRIT),
    ],
)
def test_victim_messages(exception: str, role: Role) -> None:
    tb = RankTraceback(label=b"n:0", source="x", order=1, line_number=1, exception=exception)
    assert role_of(tb) is role


# ----------------------------------------------------------------------------- handled


def _caught_then_lines(after: int, marker: str = "") -> str:
    """Rank n:0 logs a caught exception then writes ``after`` lines; later rank n:1 dies of its own."""
    lines = ["[n:0]:step 0", "[n:1]:step 0"]
    lines += [
        f"[n:0]:{marker}Traceback (most recent call last):",
        f'[n:0]:{marker}  File "/w/data.py", line 3, in read',
        f"[n:0]:{marker}KeyError: 'shard 12'",
    ]
    for step in range(after):
        lines += [f"[n:0]:step {step + 1}", f"[n:1]:step {step + 1}"]
    lines += [
        "[n:1]:Traceback (most recent call last):",
        '[n:1]:  File "/w/train.py", line 9, in step',
        "[n:1]:ZeroDivisionError: division by zero",
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("after", "role"), [(HANDLED_LINES, "handled"), (HANDLED_LINES - 1, "culprit")])
def test_a_rank_that_writes_on_caught_its_exception(tmp_path: Path, after: int, role: str) -> None:
    log = tmp_path / "job.log"
    log.write_text(_caught_then_lines(after))
    data = _errors(log)
    roles = {g["exception_type"]: g["role"] for g in data["groups"]}
    assert roles == {"KeyError": role, "ZeroDivisionError": "culprit"}
    # The caught one is the first traceback in the log: the root cause only when it was fatal.
    assert data["first_failure"]["label"] == "n:0"
    assert data["root_cause"]["label"] == ("n:1" if role == "handled" else "n:0")


@pytest.mark.parametrize(("after", "role"), [(HANDLED_LINES * 2, "handled"), (0, "culprit")])
def test_torch_marker_does_not_outweigh_the_rank_writing_on(tmp_path: Path, after: int, role: str) -> None:
    """A real 512-rank log had a traceback under [host:16]:[rank368]: whose rank then wrote thousands
    of lines under [host:16]: alone: the rank's lines are counted by its identity, marker or not."""
    log = tmp_path / "job.log"
    log.write_text(_caught_then_lines(after, marker="[rank0]:"))
    data = _errors(log)
    assert {g["exception_type"]: g["role"] for g in data["groups"]} == {
        "KeyError": role,
        "ZeroDivisionError": "culprit",
    }
    assert data["root_cause"]["label"] == ("n:1" if role == "handled" else "n:0")


def test_lines_after_a_torchrun_restart_are_new_processes(tmp_path: Path) -> None:
    text = _caught_then_lines(HANDLED_LINES)
    cut = text.index("[n:0]:step 1\n")
    restart = "[WARNING] Worker group FAILED. 3/3 attempts left; will restart worker group\n"
    log = tmp_path / "job.log"
    log.write_text(text[:cut] + restart + text[cut:])
    roles = {g["exception_type"]: g["role"] for g in _errors(log)["groups"]}
    assert roles["KeyError"] == "culprit"


def test_generated_512_rank_log_names_the_fatal_error_not_the_caught_one(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        from gen_logs import FATAL_RANK, GLOO_VICTIMS, generate
    finally:
        sys.path.remove(str(BENCH))
    log = tmp_path / "gen.log"
    generate(log, size_mb=24)
    data = _errors(log)
    assert [(g["role"], g["exception_type"], len(g["labels"])) for g in data["groups"]] == [
        ("culprit", "ValueError", 1),
        ("victim", "RuntimeError", GLOO_VICTIMS),
        ("victim", "torch.distributed.DistBackendError", 512 - 1 - GLOO_VICTIMS),
        ("handled", "ValueError", len(data["groups"][3]["labels"])),
    ]
    root = data["root_cause"]
    assert root["label"] == f"node{FATAL_RANK // 8:03d}:{FATAL_RANK}"
    assert root["exception"] == "ValueError: label 1000 out of range for 100 classes"
    assert root["where"] == "/workspace/data.py:31"
    # the caught exception of the first MB is still the first traceback in the log
    assert data["first_failure"]["exception"] == "ValueError: corrupt sample in shard 12 (skipped)"
    first = run_cli("logs", "errors", str(log)).stdout.splitlines()[0]
    assert first.startswith(f"root cause: {root['label']}: ValueError: label 1000 out of range")


@pytest.mark.parametrize("writes_on", [True, False])
def test_many_undecided_tracebacks_at_once(tmp_path: Path, writes_on: bool) -> None:
    """20 ranks print a traceback each, other ranks write 1.5 MiB (past the first 1 MiB block, where
    the 20 are counted in one pass), then the 20 write 100 lines each, or not."""
    lines = [
        f"[n:{r}]:{line}"
        for r in range(20)
        for line in (
            "Traceback (most recent call last):",
            '  File "/w/data.py", line 3, in read',
            "KeyError: 'x'",
        )
    ]
    step = 0
    while sum(map(len, lines)) < 3 << 19:
        lines += [f"[n:{r}]:step {step} loss 0.5 tokens/s 41000" for r in range(20, 40)]
        step += 1
    if writes_on:
        lines += [f"[n:{r}]:step {s}" for s in range(HANDLED_LINES) for r in range(20)]
    lines += [f"[n:{r}]:done" for r in range(20, 40)]
    log = tmp_path / "job.log"
    log.write_text("\n".join(lines) + "\n")
    [group] = _errors(log)["groups"]
    assert (group["role"], group["ranks"]) == ("handled" if writes_on else "culprit", "n:[0-19]")


def test_only_victims_in_the_log_says_the_root_cause_is_elsewhere(tmp_path: Path) -> None:
    """This node's ranks only lost their peer: the failing rank's traceback is in another node's log."""
    lines = [
        f"[b:{r}]:{line}"
        for r in range(2)
        for line in (
            "Traceback (most recent call last):",
            '  File "/w/train.py", line 9, in step',
            f"RuntimeError: [pair.cc:534] Connection closed by peer [10.0.0.{r}]:4000",
        )
    ]
    log = tmp_path / "b.log"
    log.write_text("\n".join(lines) + "\n")
    data = _errors(log)
    assert data["root_cause"] is None
    assert [g["role"] for g in data["groups"]] == ["victim"]
    first = run_cli("logs", "errors", str(log)).stdout.splitlines()[0]
    assert first.startswith("root cause: not in this log — every error is a consequence of another failure")


STRAGGLER = """\
rank 0 step 4 loss 0.61
saving checkpoint
rank 1 step 4 loss 0.58
[rank1]: Traceback (most recent call last):
[rank1]:   File "/w/train.py", line 24, in main
[rank1]:     dist.barrier()
[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to complete
W1127 11:07:25.169000 27329 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 27341 closing signal SIGTERM
E1127 11:07:25.202000 27329 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 27342) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-27_11:07:25
  host      : box
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 27341)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 27341
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-27_11:07:25
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 27342)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_a_rank_still_running_when_the_others_timed_out_is_the_lead(tmp_path: Path) -> None:
    """Seen on a real 2-rank gloo job with a 10 s timeout: rank 0 saved a checkpoint for longer; rank 1
    timed out waiting in a barrier and failed, and torchrun then stopped rank 0 with SIGTERM. The
    rank that "failed first" is a victim; the one still running is the lead."""
    log = tmp_path / "job.log"
    log.write_text(STRAGGLER)
    text = run_cli("logs", "errors", str(log)).stdout
    assert (
        "  lead: rank 0 was still running when the others failed waiting (torchrun stopped it with SIGTERM"
        in text
    )
    why = run_cli("why", "--log", str(log), "--json").json()
    assert "rank 0 was still running" in " ".join(str(n) for n in why["notes"]), why["notes"]
    # with rank 0's own error in the log, no lead
    log.write_text(STRAGGLER.replace("saving checkpoint\n", "[rank0]: ValueError: disk full\n"))
    assert "still running" not in run_cli("logs", "errors", str(log)).stdout


def test_where_is_a_library_s_frame_only_when_no_frame_is_the_user_s() -> None:
    """vLLM's worker running out of memory in its own weight loader: every frame is an installed
    package's, so `where` is vLLM's innermost frame (it was null; the user runs vLLM, not torch);
    torch's and the launcher's own frames are never a `where`, and the user's frame wins."""
    from rankscope.logs.roles import where_frame
    from rankscope.logs.tracebacks import FrameLine

    corpus = Path(__file__).with_name("corpus") / "logs" / "vllm_v1_tp2_oom_startup.log"
    root = run_cli("logs", "errors", str(corpus), "--json").json()["root_cause"]
    assert root["where"].endswith("/site-packages/vllm/model_executor/layers/linear.py:1301"), root
    vllm = FrameLine("/opt/venv/lib/python3.12/site-packages/vllm/worker.py", 10, "load")
    torch = FrameLine("/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", 20, "_call_impl")
    launcher = FrameLine("/usr/local/bin/torchrun", 8, "<module>")
    user = FrameLine("/home/me/train.py", 30, "main")
    assert where_frame([vllm, torch]) == vllm
    assert where_frame([launcher, torch]) is None
    assert where_frame([user, vllm, torch]) == user
