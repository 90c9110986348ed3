"""`rankscope watch` on a real 2-rank torchrun gloo job with neither progress markers nor output files
(its output goes to /dev/null; RANKSCOPE_INPROC=1): the ranks' flight recorders are the stall signal.

One job serves both tests (a torch job costs ~15 CPU s): it does an all_reduce every 0.05 s for 12 s,
three times --stall, then rank 1 loops outside any collective while rank 0 waits in all_reduce. The
watcher must let the healthy phase be (the recorders advance: no capture, not even a confirmation by
stacks), capture the hang from the recorders, and end the job (--then kill).
"""

from __future__ import annotations

import calendar
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.leftovers import kill_marked, marked_env

JOB = Path(__file__).with_name("watch_job.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
STALL = 4
HEALTHY = 12

pytest.importorskip("torch.distributed")


@dataclass
class Finished:
    code: int
    workdir: Path
    stderr: str
    index: list[dict[str, object]]

    def captured_text(self, name: str) -> str:
        out = self.workdir / "caps" / name
        return "\n".join(p.read_text(errors="replace") for p in sorted(out.rglob("*")) if p.is_file())


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Finished]:
    workdir = tmp_path_factory.mktemp("quiet")
    env, mark = marked_env(OMP_NUM_THREADS="1")
    job = [*TORCHRUN, str(JOB), "--scenario", "quiet", "--healthy", str(HEALTHY), "--timeout", "45"]
    argv = [sys.executable, "-m", "rankscope", "watch", "--out", str(workdir / "caps"), "--interval", "0.5"]
    argv += ["--stall", str(STALL), "--straggler-steps", "0", "--inproc", "--then", "kill"]
    # The job's output (torchrun's and the ranks') goes to /dev/null: no output file to watch.
    argv += ["--", "sh", "-c", 'exec "$@" >/dev/null 2>&1', "sh", *job]
    with open(workdir / "stderr.log", "wb") as stderr:
        process = subprocess.Popen(
            argv, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
        )
    try:
        try:
            code = process.wait(150)
        except subprocess.TimeoutExpired:
            code = -1
        index_file = workdir / "caps" / "index.jsonl"
        lines = index_file.read_text().splitlines() if index_file.exists() else []
        yield Finished(
            code,
            workdir,
            (workdir / "stderr.log").read_text(errors="replace"),
            [json.loads(x) for x in lines],
        )
    finally:
        kill_marked(mark)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_hang_without_markers_or_output_is_captured_from_the_recorders(finished: Finished) -> None:
    assert finished.code != -1, finished.stderr[-3000:]
    [stall] = [entry for entry in finished.index if entry["reason"] == "stall"]
    assert str(stall["trigger"]).startswith("no flight recorder advanced for "), stall
    assert "unchanged" in str(stall["confirmed"]), stall  # and the stacks agreed
    text = finished.captured_text(str(stall["dir"]))
    assert "load_batch_forever" in text and "train_step" in text  # both ranks, alive, where they hang
    line = next(x for x in finished.stderr.splitlines() if x.startswith("rankscope watch: stall"))
    assert "no flight recorder advanced" in line and str(stall["dir"]) in line
    assert stall["ranks"] == [1], stall  # the culprit, from the capture's document
    # Then the job was ended by the watcher, not by its 45 s collective timeout.
    assert "rankscope watch: --then kill: SIGTERM to the job" in finished.stderr


def test_a_healthy_job_doing_collectives_longer_than_the_stall_is_never_captured(finished: Finished) -> None:
    ended, count, seconds = (float(x) for x in (finished.workdir / "healthy.0").read_text().split())
    assert seconds >= HEALTHY >= 3 * STALL and count > 10  # the healthy phase ran three stall times
    assert [entry["reason"] for entry in finished.index] == ["stall"], finished.index
    taken = calendar.timegm(time.strptime(str(finished.index[0]["time"]), "%Y-%m-%dT%H:%M:%SZ"))
    assert taken >= int(ended), (finished.index, ended)  # the one capture came after the healthy phase
    # The recorders were read and advanced: no quiet spell was even suspected (no confirmation by
    # stacks), and the job was never taken for one with nothing to watch.
    assert "rankscope watch: quiet" not in finished.stderr, finished.stderr[-3000:]
    assert "no flight recorders" not in finished.stderr, finished.stderr[-3000:]
