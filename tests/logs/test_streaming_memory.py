"""`logs errors` streams: memory stays flat however many tracebacks a log holds."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.system import ensure_commands


@pytest.mark.slow
@pytest.mark.needs("time")
@pytest.mark.timeout(300)
def test_errors_memory_stays_flat_with_300k_tracebacks(tmp_path: Path) -> None:
    ensure_commands({"time": "time"})
    rng = random.Random(0)
    log = tmp_path / "many.log"
    with open(log, "w") as out:
        for i in range(300_000):
            rank = rng.randrange(512)
            p = f"[node{rank // 8:03d}:{rank}]:"
            out.write(
                f'{p}Traceback (most recent call last):\n{p}  File "/w/train.py", line 10, in step\n'
                f"{p}    load(batch)\n{p}ValueError: bad sample {i}\n"
            )
    stats = tmp_path / "time.txt"
    result = subprocess.run(
        [
            "/usr/bin/time",
            "-f",
            "%M",
            "-o",
            str(stats),
            sys.executable,
            "-m",
            "rankscope",
            "logs",
            "errors",
            str(log),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2].startswith(
        "1 distinct error(s) (1 culprit) from 512 rank(s) (300000 tracebacks"
    )
    peak_kib = int(stats.read_text().split()[-1])
    assert peak_kib < 128 * 1024, f"peak RSS {peak_kib} KiB"
