"""A job stopped from outside: torchrun's `Received N death signal` (its forms), every rank's
KeyboardInterrupt, and the rule that any rank's own failure in the same log is the stronger story.
Whole logs of each are in the corpus (tests/logs/corpus/cases.toml: recorded_torchrun_sigterm.log,
recorded_torchrun_ctrl_c.log, torchrun_sighup_pdsh_old.log, srun_task_failed_then_sigterm.log)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli_here

from rankscope.logs.stopped import signal_of


@pytest.mark.parametrize(
    ("line", "number"),
    [
        (
            b"W1126 15:39:17.578000 21567 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers",
            15,
        ),
        (
            b"WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers",
            1,
        ),
        (
            b"W0616 00:37:22.830000 4015698 torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM death signal, shutting down workers",
            15,
        ),
        (b"[default0]: the death signal of a process is not the launcher's line", None),
    ],
)
def test_the_launchers_line_names_its_signal(line: bytes, number: int | None) -> None:
    assert signal_of(line) == number


def _interrupted(rank: int) -> list[str]:
    return [
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "/srv/train.py", line 40, in <module>',
        f"[rank{rank}]:     loss.backward()",
        f"[rank{rank}]: KeyboardInterrupt",
    ]


def test_every_rank_interrupted_is_a_job_stopped_by_sigint_not_a_rank_to_blame(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("\n".join(_interrupted(1) + _interrupted(0)) + "\n")
    data = run_cli_here("logs", "errors", str(log), "--json").json()
    verdict = data["verdict"]
    assert (verdict["cause"], verdict["who"]) == ("stopped_from_outside", None)
    assert "ranks 0-1 (KeyboardInterrupt) got SIGINT" in verdict["what"]
    assert [g["role"] for g in data["groups"]] == ["victim"]


def test_a_ranks_own_error_before_the_interrupt_is_the_verdict(tmp_path: Path) -> None:
    own = [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/srv/train.py", line 12, in <module>',
        "[rank1]:     load()",
        "[rank1]: FileNotFoundError: [Errno 2] No such file or directory: '/data/shard-7'",
        "W1126 15:39:28.744000 21638 torch/distributed/elastic/agent/server/api.py:753] Received 2 death signal, shutting down workers",
    ]
    log = tmp_path / "job.log"
    log.write_text("\n".join(own + _interrupted(0)) + "\n")
    verdict = run_cli_here("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["who"], verdict["exception"]) == (
        "python_exception",
        "1",
        "FileNotFoundError",
    )


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("Killed", "sigkill"),
        ("Segmentation fault (core dumped)", "sigsegv"),
        ("./run.sh: line 12: 48213 Killed                  torchrun --nproc-per-node 8 train.py", "sigkill"),
        ("zsh: killed     python train.py", "sigkill"),
        ("Killed processes: 3", None),
        ("[rank0]: Killed", None),
    ],
)
def test_a_shells_word_that_its_command_died_of_a_signal(
    tmp_path: Path, line: str, cause: str | None
) -> None:
    log = tmp_path / "job.log"
    log.write_text(f"step 10 loss 2.01\n{line}\n")
    verdict = run_cli_here("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"] if verdict else None) == cause
    if cause is not None:
        assert verdict["who"] is None and verdict["what"].startswith(
            "shell: the command it ran was killed by signal"
        )
