"""A rank that stopped because one of its DataLoader workers died: the cause line (`DataLoader worker
(pid N) is killed by signal: X.`) says how, and the verdict's next step says what that usually is on a
training node. The bus-error case is the corpus's dataloader_bus_error.log."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli_here

CORPUS = Path(__file__).parent / "corpus" / "logs"


def _log(tmp_path: Path, signal: str) -> Path:
    path = tmp_path / "job.log"
    path.write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/usr/lib/python3/dist-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler\n'
        "[rank1]:     _error_if_any_worker_fails()\n"
        f"[rank1]: RuntimeError: DataLoader worker (pid 60233) is killed by signal: {signal}. \n"
        "[rank1]:\n"
        "[rank1]: The above exception was the direct cause of the following exception:\n"
        "[rank1]:\n"
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/home/u/train.py", line 120, in <module>\n'
        "[rank1]:     for step, batch in enumerate(loader):\n"
        "[rank1]: RuntimeError: DataLoader worker (pid(s) 60233) exited unexpectedly\n"
    )
    return path


@pytest.mark.parametrize(
    ("signal", "words"),
    [
        ("Killed", "was killed by SIGKILL, most often the kernel's OOM killer"),
        ("Segmentation fault", "crashed in native code"),
        ("Terminated", None),
    ],
)
def test_the_workers_signal_says_what_to_do(tmp_path: Path, signal: str, words: str | None) -> None:
    log = _log(tmp_path, signal)
    verdict = run_cli_here("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["who"], verdict["where"]) == ("1", "/home/u/train.py:120")
    if words is None:
        assert verdict["next_step"] == ""
    else:
        assert (
            verdict["next_step"].startswith("a DataLoader worker of this rank (pid 60233) ")
            and words in verdict["next_step"]
        )
        assert words in run_cli_here("why", "--log", str(log), "--json").json()["verdict"]["next_step"]


def test_a_bus_error_points_at_shared_memory() -> None:
    text = run_cli_here("logs", "errors", str(CORPUS / "dataloader_bus_error.log")).stdout
    assert "next: a DataLoader worker of this rank (pid 7781) died of SIGBUS: /dev/shm is too small" in text
