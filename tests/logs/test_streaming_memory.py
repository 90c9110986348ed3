"""`logs errors` streams: memory stays flat however many tracebacks a log holds."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.system import ensure_commands


def _write_log(path: Path, tracebacks: int) -> None:
    rng = random.Random(0)
    with open(path, "w") as out:
        for i in range(tracebacks):
            rank = rng.randrange(512)
            p = f"[node{rank // 8:03d}:{rank}]:"
            out.write(
                f'{p}Traceback (most recent call last):\n{p}  File "/w/train.py", line 10, in step\n'
                f"{p}    load(batch)\n{p}ValueError: bad sample {i}\n"
            )


def _errors_peak_kib(tmp_path: Path, tracebacks: int) -> int:
    """Peak RSS of `logs errors` on a log of ``tracebacks`` tracebacks of 512 ranks."""
    log = tmp_path / f"many-{tracebacks}.log"
    _write_log(log, tracebacks)
    stats = tmp_path / f"time-{tracebacks}.txt"
    argv = [sys.executable, "-m", "rankscope", "logs", "errors", str(log)]
    result = subprocess.run(
        ["/usr/bin/time", "-f", "%M", "-o", str(stats), *argv], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2].startswith(
        f"1 distinct error(s) (1 culprit) from 512 rank(s) ({tracebacks} tracebacks"
    )
    return int(stats.read_text().split()[-1])


@pytest.mark.slow
@pytest.mark.needs("time")
@pytest.mark.timeout(300)
def test_errors_memory_stays_flat_with_four_times_the_tracebacks(tmp_path: Path) -> None:
    """40,000 tracebacks (7 MB) take no more memory than 10,000: kept per traceback, the 30,000
    more would take 25 MiB (a collected traceback is about 890 bytes, measured with tracemalloc)."""
    ensure_commands({"time": "time"})
    small = _errors_peak_kib(tmp_path, 10_000)
    large = _errors_peak_kib(tmp_path, 40_000)
    assert large - small < 8 * 1024, f"peak RSS {small} KiB with 10,000 tracebacks, {large} KiB with 40,000"
    assert large < 128 * 1024, f"peak RSS {large} KiB"
