"""Reading progress: the library reports it through a callable; the CLI shows it on a terminal only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import run_cli

from rankscope.logs.reading import Reading
from rankscope.logs.sources import discover


def _log(path: Path, megabytes: float) -> Path:
    line = b"[n1:0]:step done\n"
    path.write_bytes(line * int(megabytes * 1e6 / len(line)))
    return path


def test_reading_reports_megabytes_read_to_the_callable(tmp_path: Path) -> None:
    path = _log(tmp_path / "job.log", 2.5)
    messages: list[str] = []
    reading = Reading(discover([str(path)]), progress=messages.append)
    for opened in reading.sources():
        for _window in opened.windows:
            pass
    assert messages, "no progress reported"
    assert messages[0].startswith("reading ") and messages[0].endswith("job.log  1 / 2 MB")
    assert messages[-1].endswith("job.log  2 / 2 MB")  # 2.5e6 bytes, rounded down to whole MB


def test_reading_without_a_callable_reports_nothing(tmp_path: Path) -> None:
    reading = Reading(discover([str(_log(tmp_path / "job.log", 0.1))]))
    assert sum(1 for opened in reading.sources() for _ in opened.windows) == 1
    assert reading.progress is None


def test_cli_shows_progress_on_a_terminal_and_erases_it(tmp_path: Path) -> None:
    path = _log(tmp_path / "job.log", 0.1)
    primary, secondary = os.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "rankscope", "logs", "ranks", str(path)],
            stdout=subprocess.PIPE,
            stderr=secondary,
            timeout=120,
        )
        os.close(secondary)
        seen = b""
        while True:
            try:
                data = os.read(primary, 4096)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not data:
                break
            seen += data
    finally:
        os.close(primary)
    assert proc.returncode == 0
    assert b"\r\x1b[Kreading " in seen and b"job.log  0 / 0 MB" in seen
    assert seen.endswith(b"\r\x1b[K"), seen  # erased before the report
    assert b"reading" not in proc.stdout


def test_cli_is_quiet_when_stderr_is_piped(tmp_path: Path) -> None:
    result = run_cli("logs", "ranks", str(_log(tmp_path / "job.log", 0.1)))
    assert result.returncode == 0
    assert result.stderr == ""
