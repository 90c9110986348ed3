"""A caught traceback says why it counts as caught: a logger printed it and the rank wrote on (vLLM's
workers, which log an exception and hand it to the driver) is not "100+ more lines" in a 62-line log."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli

CORPUS = Path(__file__).resolve().parent / "corpus" / "logs"


def test_a_logged_and_forwarded_worker_error_is_handled_for_what_it_is() -> None:
    lines = run_cli(
        "logs", "errors", str(CORPUS / "vllm_custom_allreduce_invalid_arg.log")
    ).stdout.splitlines()
    (handled,) = [line for line in lines if "— handled (" in line]
    assert "100+" not in handled, handled
    assert "its rank wrote on" in handled, handled
