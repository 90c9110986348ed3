"""`rankscope why --log` on the output of real jobs that already ended, as users run them: under
torchrun (``python -m torch.distributed.run``), a rank killed by SIGSEGV with faulthandler on, a rank
that ended by ``os._exit(1)``, and a rank that returned from its main early (exit code 0) so that the
other rank lost its gloo peer; under ``torch.multiprocessing``'s launcher, a rank killed by SIGSEGV
(``mp.spawn``) and a rank that raised (``mp.start_processes`` with ``fork``: the same launcher and
words, and workers that do not import torch again). Each job runs once; the first two start no torch
in their workers (only torchrun does). `why` runs in this process (``run_cli_here``), but for the
first job's, through the command line."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from tests.support.cli import CliResult, run_cli, run_cli_here
from tests.support.jobs import run_torchrun

from rankscope.why.report import VICTIMS_ONLY

pytestmark = pytest.mark.slow

DIES = """\
import ctypes, faulthandler, os, sys, time

faulthandler.enable()


def save_checkpoint(how):
    if how == "segv":
        ctypes.string_at(0)
    os._exit(1)


def main():
    if os.environ["RANK"] == "1":
        save_checkpoint(sys.argv[1])
    time.sleep(120)  # rank 0: until torchrun stops it


main()
"""

EARLY = """\
import torch
import torch.distributed as dist


def load_config(rank):
    return {"epochs": 0 if rank == 1 else 1}


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if load_config(rank)["epochs"] == 0:
        return  # nothing to do here: exit code 0, which torchrun does not report
    dist.all_reduce(torch.ones(2))


main()
"""


SPAWN = """\
import ctypes, faulthandler, sys, time
import torch.multiprocessing as mp


def save_checkpoint(rank):
    if rank == 1 and sys.argv[1] == "segv":
        ctypes.string_at(0)
    if rank == 1:
        raise OSError("disk full while saving on rank 1")


def worker(rank):
    faulthandler.enable()
    save_checkpoint(rank)
    time.sleep(120)  # rank 0: until mp.spawn stops it


if __name__ == "__main__":
    if sys.argv[2] == "fork":
        mp.start_processes(worker, nprocs=2, start_method="fork")
    else:
        mp.spawn(worker, nprocs=2)
"""


def _ended(tmp_path_factory: pytest.TempPathFactory, name: str, text: str, *args: str) -> Path:
    workdir = tmp_path_factory.mktemp(name)
    script = workdir / "train.py"
    script.write_text(text)
    log = workdir / "train.log"
    code = run_torchrun(workdir, log, *args, script=script, timeout=120)
    assert code != 0, log.read_text()
    return log


def _why(log: Path, run: Callable[..., CliResult] = run_cli_here) -> tuple[int, dict[str, Any], str]:
    result = run("why", "--log", str(log), "--json")
    text = run("why", "--log", str(log))
    return result.returncode, result.json(), text.stdout


def test_a_segfault_is_placed_by_the_faulthandler_dump_in_the_output(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    segv_log = _ended(tmp_path_factory, "segv", DIES, "segv")
    code, document, _ = _why(segv_log, run_cli)
    assert code == 15, document
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("sigsegv", [1])
    assert verdict["text"].startswith("rank 1 was killed by SIGSEGV (a segmentation fault")
    assert verdict["location"] == "save_checkpoint (train.py:8)"
    first = verdict["evidence"][0]
    assert (
        first["source"].startswith(f"{segv_log}:")
        and "Fatal Python error: Segmentation fault" in first["text"]
    )
    assert any("killed by signal 11" in e["text"] for e in verdict["evidence"])  # torchrun's own line


def test_a_rank_that_exited_with_a_code_and_no_traceback(tmp_path_factory: pytest.TempPathFactory) -> None:
    code, document, _ = _why(_ended(tmp_path_factory, "exit1", DIES, "exit"))
    assert code == 15, document
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("tracebacks_elsewhere", [1])
    assert verdict["text"].startswith(
        "rank 1 exited with an error code, and no traceback of it is in this output"
    )


def test_a_rank_that_returned_early_leaves_only_victims_and_none_is_blamed(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Rank 1 returns from main (exit 0: torchrun reports nothing of it); rank 0 loses its gloo peer
    and torchrun reports rank 0's exit code 1. Rank 0 is the victim, not the verdict."""
    pytest.importorskip("torch.distributed")
    early_log = _ended(tmp_path_factory, "early", EARLY)
    text = early_log.read_text()
    assert "Connection closed by peer" in text or "Connection reset by peer" in text or "Read error" in text
    code, document, report = _why(early_log)
    assert code == 4, document  # too partial to judge: the rank that ended first said nothing
    assert document["outcome"] == "partial" and document["verdict"] is None
    assert any(n.startswith(VICTIMS_ONLY + " (rank 0: RuntimeError: ") for n in document["notes"])
    assert report.splitlines()[2].startswith("No rank to blame: " + VICTIMS_ONLY)
    assert "exit code 0" in report


@pytest.mark.parametrize(
    ("how", "start"), [pytest.param("segv", "spawn", id="segv"), pytest.param("raise", "fork", id="raise")]
)
def test_a_rank_that_died_under_mp_spawn_is_its_process_index(tmp_path: Path, how: str, start: str) -> None:
    """``mp.spawn`` (``mp.start_processes`` alike) says ``ProcessExitedException: process 1
    terminated with signal SIGSEGV``, or ``ProcessRaisedException`` and, after ``-- Process 1
    terminated with the following error:``, the process's own traceback: its launcher's words (a
    victim's traceback, never the verdict) name rank 1, and faulthandler's dump (or the traceback)
    its place."""
    pytest.importorskip("torch.multiprocessing")
    script = tmp_path / "train.py"
    script.write_text(SPAWN)
    log = tmp_path / "train.log"
    with open(log, "wb") as out:
        job = subprocess.Popen(
            [sys.executable, str(script), how, start],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=dict(os.environ, OMP_NUM_THREADS="1"),
            start_new_session=True,
        )
        try:
            assert job.wait(120) != 0
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    code, document, _ = _why(log)
    assert code == 15, document
    verdict = document["verdict"]
    assert verdict["location"] == f"save_checkpoint (train.py:{7 if how == 'segv' else 9})", verdict
    if how == "segv":
        assert (verdict["cause"], verdict["ranks"]) == ("sigsegv", [1]), verdict
        assert any(e["text"] == "mp.spawn: process 1 was killed by signal 11" for e in verdict["evidence"])
    else:
        assert (verdict["cause"], verdict["ranks"]) == ("python_exception", [1]), verdict
        assert verdict["text"] == "rank 1 raised OSError: disk full while saving on rank 1"
