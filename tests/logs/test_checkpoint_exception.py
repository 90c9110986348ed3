"""torch.distributed.checkpoint's CheckpointException: every rank raises it when one rank's save or
load step failed, and its message quotes that rank's traceback under ``(RANK n)``. The root cause is
the quoted rank's error, not the first rank that printed the wrapper (the corpus case
``dcp_enospc_one_rank.log`` has the same shape)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli, run_cli_here
from tests.support.jobs import run_torchrun

JOB = Path(__file__).parent / "jobs" / "dcp_save_job.py"


def _wrapper(prefix: str, ranks: str) -> str:
    return (
        f"{prefix}Traceback (most recent call last):\n"
        f'{prefix}  File "/srv/llm/train.py", line 120, in save_step\n'
        f"{prefix}    dcp.save(state, checkpoint_id=path)\n"
        f'{prefix}  File "/usr/lib/python3/dist-packages/torch/distributed/checkpoint/utils.py", line 263, in all_reduce\n'
        f"{prefix}    raise final_result\n"
        f"{prefix}torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([{ranks}])\n"
    )


def _quoted(prefix: str, rank: int, error: str) -> str:
    return (
        f"{prefix}Traceback (most recent call last): (RANK {rank})\n"
        f'{prefix}  File "/usr/lib/python3/dist-packages/torch/distributed/checkpoint/filesystem.py", line 422, in _write_files_from_queue\n'
        f'{prefix}    with create_stream(file_name, "wb") as stream:\n'
        f"{prefix}{error}\n"
    )


# torch < 2.2 printed no [rankN] marker: torchrun --tee's [defaultN] prefixes, two ranks failed
# with different errors; rank 3's quote comes first in the log, rank 2's wrapper first of all
TWO_FAILED = "".join(
    _wrapper(f"[default{r}]:", "1, 3")
    + _quoted(
        f"[default{r}]:", 3, "PermissionError: [Errno 13] Permission denied: '/ckpt/step_40/__3_0.distcp'"
    )
    + _quoted(f"[default{r}]:", 1, "OSError: [Errno 28] No space left on device")
    for r in (2, 0, 1, 3)
)


def test_the_quoted_ranks_errors_are_the_culprits_and_the_wrappers_their_victims(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(TWO_FAILED)
    data = run_cli_here("logs", "errors", str(log), "--json").json()
    verdict = data["verdict"]
    assert (verdict["who"], verdict["global_rank"], verdict["exception"]) == ("3", 3, "PermissionError")
    roles = {(g["exception_type"], g["role"], g["ranks"]) for g in data["groups"]}
    assert roles == {
        ("PermissionError", "culprit", "3"),
        ("OSError", "culprit", "1"),
        ("torch.distributed.checkpoint.api.CheckpointException", "victim", "0-3"),
    }, data["groups"]
    text = run_cli_here("logs", "errors", str(log)).stdout
    assert "(quoted in the CheckpointException of rank(s) 0-3)" in text, text
    assert "first seen: 3, quoted by 2 (" in text, text
    # four ranks quoted each error: one traceback of one rank, not four culprits
    assert "1 other culprit traceback(s) came later" in text, text


def test_a_quote_without_rank_prefixes_still_names_the_rank(tmp_path: Path) -> None:
    """Ranks writing into one console with no prefix at all (``python -m torch.distributed.run``
    without --tee, torch < 2.2): the quoted rank is still known from DCP's own header."""
    log = tmp_path / "train.log"
    log.write_text(_wrapper("", "2") + _quoted("", 2, "OSError: [Errno 28] No space left on device"))
    verdict = run_cli_here("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["who"], verdict["exception"]) == ("2", "OSError"), verdict


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_failed_save_names_the_rank_whose_write_failed(tmp_path: Path) -> None:
    """A real 3-rank gloo job: rank 1's checkpoint file is a directory, so its write fails."""
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "__1_0.distcp").mkdir(parents=True)
    log = tmp_path / "job.log"
    code = run_torchrun(tmp_path, log, str(checkpoint), script=JOB, timeout=240, nproc=3)
    assert code != 0, log.read_text(errors="replace")[-2000:]
    assert "(RANK 1)" in log.read_text(errors="replace"), log.read_text(errors="replace")[-2000:]
    result = run_cli("logs", "errors", str(log), "--json")
    verdict = result.json()["verdict"]
    assert (verdict["who"], verdict["global_rank"], verdict["exception"]) == ("1", 1, "IsADirectoryError"), (
        verdict
    )
    assert "__1_0.distcp" in verdict["what"], verdict
