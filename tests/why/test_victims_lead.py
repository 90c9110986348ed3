"""`why --log` on a real job whose only error a rank raised itself was caught: the lead when no rank is to blame."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli_here


def test_a_caught_error_before_every_victim_is_named_when_no_rank_is_to_blame() -> None:
    """A real torch 2.13 gloo job (tests/logs/corpus): a worker caught and logged an OSError (no rank
    prefix) and went on; the others timed out. No rank to blame, but the caught error is the lead."""
    log = Path(__file__).parents[1] / "logs" / "corpus" / "logs" / "recorded_logged_then_peers_time_out.log"
    result = run_cli_here("why", "--log", str(log))
    assert result.returncode == 4, result.stdout + result.stderr
    head = result.stdout.split("\n\n")[1]
    assert head.startswith("No rank to blame: every error seen is a consequence"), head
    assert "before them a process without a rank caught OSError: [Errno 28] No space left on device" in head
    assert f"({log}:12)" in head, head
