"""torch's "unhandled system error" names no reason; the NCCL WARN line before it does. The root
cause shows it under the error (a refused connection is a set-up fact, not a finding of its own)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli

CORPUS = Path(__file__).resolve().parent / "corpus" / "logs"


def test_a_refused_connection_is_shown_under_the_system_error() -> None:
    lines = run_cli("logs", "errors", str(CORPUS / "nccl_bootstrap_refused.log")).stdout.splitlines()
    assert "unhandled system error" in lines[0], lines
    (warning,) = [line for line in lines if line.startswith("  NCCL's warning: ")]
    assert "asr-v100-07,pid=30211: Connect to 10.61.4.19<40817> failed : Connection refused" in warning
    assert "line 11" in warning


def test_an_error_with_nccl_s_own_reason_shows_no_warning(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "node1:11:12 [0] include/socket.h:390 NCCL WARN Connect to 10.0.0.2<4000> failed : Connection refused\n"
        "Traceback (most recent call last):\n"
        '  File "/job/train.py", line 9, in <module>\n'
        "    main()\n"
        "ValueError: bad config\n"
    )
    lines = run_cli("logs", "errors", str(log)).stdout.splitlines()
    assert lines[0].startswith("root cause: (no rank prefix): ValueError: bad config"), lines
    assert not any(line.startswith("  NCCL's warning") for line in lines), lines
