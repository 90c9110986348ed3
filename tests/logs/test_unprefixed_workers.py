"""A worker's traceback without a rank prefix in a log whose other tracebacks carry torch's marker.

Real torch 2.13 gloo runs (tests/logs/corpus/logs/recorded_*): torch marks a rank's uncaught
traceback only once ``init_process_group`` has returned, so without ``--tee`` a rank that fails
inside it prints its traceback bare, and ``logging.exception`` never carries the marker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.cli import run_cli_here

LOGS = Path(__file__).parent / "corpus" / "logs"


def _errors(name: str, *args: str) -> Any:
    return run_cli_here("logs", "errors", str(LOGS / name), *args)


def test_a_restarted_attempt_that_fails_in_init_is_the_root_cause() -> None:
    result = _errors("recorded_torchrun_restart_fails_in_init.log", "--json")
    data = result.json()
    assert data["verdict"]["exception"] == "RuntimeError"
    assert "ens5" in data["root_cause"]["exception"]
    # the first attempt's error is kept beside it, superseded
    first = [f for f in data["findings"] if f["exception"] == "ValueError"]
    assert first and all(f["superseded"] for f in first)
    # listed with the ranks' errors, not as the launcher's; torchrun's ChildFailedError stays apart
    assert [g["exception_type"] for g in data["unprefixed_groups"]] == [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
    ]
    text = _errors("recorded_torchrun_restart_fails_in_init.log").stdout
    assert "rank 1 (the one process its launcher reports failed)" in text.splitlines()[0]
    assert "the first attempt failed with ValueError at /home/user/job/restart.py:12" in text
    assert "no rank's traceback of a later attempt" not in text


def test_a_logged_traceback_without_prefix_is_handled_and_the_lead() -> None:
    data = _errors("recorded_logged_then_peers_time_out.log", "--json").json()
    roles = {g["exception_type"]: g["role"] for g in data["groups"]}
    assert roles["OSError"] == "handled"
    assert data["verdict"] is None
    lines = _errors("recorded_logged_then_peers_time_out.log").stdout.splitlines()
    assert lines[0].startswith("root cause: not in this log")
    assert lines[1].startswith("  lead: before them a worker without a rank prefix caught OSError")
    assert "from 3 rank(s) and a worker without a rank prefix" in lines[2]
