"""Run inside a fresh PID namespace (``unshare --pid --fork --mount-proc``) by test_grab.py.

Starts a hung 2-rank torchrun job, then ``rankscope core grab --job --dir DIR``: the only job
``--job`` can find is this one, whatever else runs on the machine (other tests' jobs too).
Prints one JSON object: the grab's exit code, stdout, stderr, and the job's worker pids (as this
namespace numbers them, like the core files' names). Usage: grab_job.py WORKDIR CORE_DIR
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rankscope.demo.launch import start_torchrun


def main() -> None:
    workdir, cores = Path(sys.argv[1]), sys.argv[2]
    job = start_torchrun(
        nproc=2, script_args=("--scenario", "skip-barrier", "--culprit", "1"), workdir=workdir
    )
    try:
        job.wait_ready(timeout=180)
        grab = subprocess.run(
            [sys.executable, "-m", "rankscope", "core", "grab", "--job", "--dir", cores],
            capture_output=True,
            text=True,
            timeout=240,
        )
        result = {"returncode": grab.returncode, "stdout": grab.stdout, "stderr": grab.stderr}
        print(json.dumps({**result, "pids": job.worker_pids()}))
    finally:
        job.stop()


if __name__ == "__main__":
    main()
