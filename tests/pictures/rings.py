"""Trace rings of two ranks, made by really tracing a small program twice (``RANK=0`` and ``1``): no
torch, so cheap. Each rank loads batches and steps (``rankscope.progress``), rank 1 slower; each
stops tracing inside ``wait_for_peer``, which is still open at the end of its ring."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROGRAM = """\
import sys, time
import rankscope
import rankscope.trace as rt

rank = int(sys.argv[1])

def load_batch():
    time.sleep(0.004 * (1 + 2 * rank))

def forward():
    time.sleep(0.003)

def train_step(step):
    load_batch()
    forward()

def wait_for_peer():
    time.sleep(0.02)
    rt.stop()

rt.start(out="traces", ring_records=4096)
for step in range(5):
    train_step(step)
    rankscope.progress(step=step)
wait_for_peer()
"""


def traced_ranks(workdir: Path) -> Path:
    """The ``traces`` directory of the two ranks' rings."""
    (workdir / "ranks.py").write_text(PROGRAM)
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}
        subprocess.run(
            [sys.executable, "ranks.py", str(rank)],
            cwd=workdir,
            env=env,
            check=True,
            timeout=60,
            capture_output=True,
        )
    return workdir / "traces"
