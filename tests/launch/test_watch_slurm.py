"""`rankscope launch --watch` against a real SLURM time limit: the sbatch script it writes, submitted
to the single-node SLURM cluster of tests/support/slurm.py with a two-minute limit and the warning
55 s before it (``#SBATCH --time=2``, ``--signal=B:USR1@55``, in place of the script's 120 s). SLURM
sends SIGUSR1 to the batch shell, whose trap passes it to the watcher, which captures (reason
``request``) while the rank still runs; the job is then cancelled (the limit is not waited for).

SLURM sends the warning from a timer of its own, up to a minute before the time asked for (its
documentation of --signal). With a one-minute limit it could then come in the job's first
second, before the script has set its trap and the watcher its handler, and end the batch shell:
the two-minute limit puts the earliest moment 5 s after the start, and the warning comes by 65 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.slurm import SlurmCluster
from tests.support.sshd import free_port

from rankscope.launch.builders import WATCH_WARNING, build
from rankscope.launch.plan import Launcher, LaunchPlan

pytestmark = [pytest.mark.slow, pytest.mark.needs("slurm")]

#: One rank that trains for ever: steps recorded, one line a step (no stall, no death).
TRAIN = """import time

import rankscope

step = 0
while True:
    rankscope.progress(step=step)
    print(f"step {step}", flush=True)
    step += 1
    time.sleep(0.5)
"""


def test_slurms_time_limit_warning_reaches_the_watcher_which_captures_before_the_limit(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    pytest.importorskip("torch.distributed")
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    plan = LaunchPlan(
        str(train), python=sys.executable, torchrun=(sys.executable, "-m", "torch.distributed.run"),
        workdir=str(tmp_path), port=free_port(), slurm_gpus=False, watch=True,
    )  # fmt: skip
    text = build(plan, [Launcher.SBATCH]).recipes[0].files[0].text
    warning = f"#SBATCH --signal=B:USR1@{WATCH_WARNING}\n"
    assert warning in text
    script = tmp_path / "job.sbatch"
    script.write_text(text.replace(warning, "#SBATCH --signal=B:USR1@55\n#SBATCH --time=2\n"))
    # `rankscope` on the batch shell's PATH, as on a node where it is installed
    bin_dir = str(Path(sys.executable).parent)
    env = {**slurm_cluster.env, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    submitted = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={tmp_path}", str(script)],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    jobid = submitted.stdout.strip().split(";", 1)[0]
    output = tmp_path / f"rankscope-job-{jobid}.out"
    index = tmp_path / f"rankscope-watch-{jobid}" / "index.jsonl"
    try:
        slurm_cluster.wait_state(jobid, "RUNNING")
        started = time.monotonic()
        while not index.exists() or not index.read_text().strip():
            # the warning is due 65 s after the start; the limit (120 s) bounds the wait
            if time.monotonic() - started > 150 or slurm_cluster.job_state(jobid) != "RUNNING":
                log = output.read_text(errors="replace")[-3000:] if output.exists() else ""
                raise AssertionError(f"no capture of job {jobid}: {log}\n{slurm_cluster.log_tail()}")
            time.sleep(0.5)
        assert slurm_cluster.job_state(jobid) == "RUNNING"  # before the limit ended it
        entry = json.loads(index.read_text().splitlines()[0])
        assert entry["reason"] == "request" and "SIGUSR1" in entry["trigger"], entry
    finally:
        slurm_cluster.run("scancel", jobid, check=False)
    deadline = time.monotonic() + 60
    while slurm_cluster.job_state(jobid) and time.monotonic() < deadline:
        time.sleep(0.5)
    log = output.read_text(errors="replace")
    assert "rankscope watch: request" in log, log[-3000:]
    assert "step 3" in log  # the rank ran under torchrun, its lines labelled (--tee 3 --role)
    document = json.loads((index.parent / str(entry["dir"]) / "watch.json").read_text())
    assert document["argv"][3:6] == ["why", "--jobid", jobid], document["argv"]
