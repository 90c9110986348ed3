"""A worker's traceback without a rank prefix (torchrun without --tee, DeepSpeed's launcher) is the
rank its launcher reports as the one process that failed: the summary's global rank where torchrun
prints one, else the local rank of the launcher's line. Two failed processes, or a prefixed culprit,
leave it unnamed. A launcher's timestamp before it is not taken for the error's time. Logs written
here in the forms torchrun (2.x glog lines and its summary) and DeepSpeed's launcher print."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli, run_cli_here
from tests.support.deepspeed_text import deepspeed_node
from tests.support.torchrun_text import failure_summary

TRACEBACK = """\
Traceback (most recent call last):
  File "/job/train.py", line 90, in <module>
    loss = step(batch)
  File "/job/train.py", line 61, in step
    return model(batch).sum()
RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x512 and 1024x256)
"""
FAILED = (
    "E1120 10:05:00.300000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
    "local_rank: {local} (pid: 500{local}) of binary: /usr/bin/python3\n"
)
#: DeepSpeed's launcher with one worker: its report names the worker that failed.
DEEPSPEED = """\
[2026-11-20 10:00:00,100] [INFO] [launch.py:256:main] process 5001 spawned with command: ['python3', '-u', 'train.py', '--local_rank=0']
{traceback}[2026-11-20 10:05:00,200] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 5001
[2026-11-20 10:05:00,300] [ERROR] [launch.py:325:sigkill_handler] ['python3', '-u', 'train.py', '--local_rank=0'] exits with return code = 1
"""


def _errors(tmp_path: Path, text: str) -> tuple[str, dict[str, object]]:
    log = tmp_path / "job.log"
    log.write_text(text)
    first = run_cli("logs", "errors", str(log)).stdout.splitlines()[0]
    return first, run_cli("logs", "errors", str(log), "--json").json()["verdict"]


def test_torchrun_s_one_failed_local_rank_names_the_traceback(tmp_path: Path) -> None:
    first, verdict = _errors(tmp_path, "step 10\n" + TRACEBACK + FAILED.format(local=1))
    assert first.startswith(
        "root cause: local rank 1 (the one process its launcher reports failed): RuntimeError: mat1 and mat2"
    ), first
    assert (verdict["cause"], verdict["who"]) == ("python_exception", "1")


def test_the_summary_s_global_rank_is_preferred_and_why_names_it(tmp_path: Path) -> None:
    text = TRACEBACK + FAILED.format(local=1) + failure_summary(5, 1, "node3", 5001, "2026-11-20_10:05:00")
    first, verdict = _errors(tmp_path, text)
    assert first.startswith("root cause: rank 5 (the one process its launcher reports failed):"), first
    assert verdict["who"] == "5"
    why = run_cli_here("why", "--log", str(tmp_path / "job.log"), "--json").json()["verdict"]
    assert why["text"].startswith("rank 5 raised RuntimeError: mat1 and mat2 shapes"), why


def test_two_failed_processes_leave_it_unnamed(tmp_path: Path) -> None:
    first, verdict = _errors(tmp_path, TRACEBACK + FAILED.format(local=1) + FAILED.format(local=2))
    assert first.startswith("root cause: (no rank prefix): RuntimeError"), first
    assert verdict["who"] is None


def test_a_prefixed_culprit_leaves_the_unprefixed_traceback_alone(tmp_path: Path) -> None:
    prefixed = "".join(f"[rank0]: {line}\n" for line in TRACEBACK.replace("mat1", "matA").splitlines())
    first, _verdict = _errors(tmp_path, prefixed + TRACEBACK + FAILED.format(local=1))
    assert "the one process" not in first, first


def test_deepspeed_s_launcher_of_one_worker_names_it_and_lends_no_timestamp(tmp_path: Path) -> None:
    first, verdict = _errors(tmp_path, DEEPSPEED.format(traceback=TRACEBACK))
    assert first.startswith("root cause: local rank 0 (the one process its launcher reports failed):"), first
    assert first.endswith("the first fatal error in log order"), first
    assert verdict["who"] == "0"


def test_deepspeed_s_report_of_several_workers_names_none_of_them(tmp_path: Path) -> None:
    """Its report's ``--local_rank=3`` is the last worker it started: the traceback stays unnamed, and
    the report alone says a local rank failed, not which."""
    first, verdict = _errors(tmp_path, deepspeed_node(4, TRACEBACK))
    assert first.startswith("root cause: (no rank prefix): RuntimeError: mat1 and mat2"), first
    assert verdict["who"] is None
    first, verdict = _errors(tmp_path, deepspeed_node(4, ""))
    assert first.startswith(
        "root cause: deepspeed: a local rank exited with code 1 (its launcher's line names the last "
        "worker it started, local rank 3, whichever failed)"
    ), first
    assert (verdict["who"], verdict["cause"]) == (None, "tracebacks_elsewhere")


MPIRUN = """\
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: {name}
  Exit code:    1
--------------------------------------------------------------------------
"""


def test_open_mpi_s_first_failed_process_is_a_global_rank(tmp_path: Path) -> None:
    """Open MPI 4.x's process name, then 5.x's (PRRTE): the last number is MPI_COMM_WORLD's rank."""
    for name in ("[[51234,1],3]", "[prterun-node07-4411@1,3]"):
        first, verdict = _errors(tmp_path, "step 10\n" + TRACEBACK + MPIRUN.format(name=name))
        assert first.startswith("root cause: rank 3 (the one process its launcher reports failed):"), first
        assert (verdict["who"], verdict["global_rank"]) == ("3", 3)


def test_mpirun_s_report_alone_is_the_rank_s_exit(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("step 10\n" + MPIRUN.format(name="[[51234,1],6]"))
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["who"], verdict["what"]) == (
        "tracebacks_elsewhere",
        "6",
        "mpirun: rank 6 exited with code 1",
    )


def test_deepspeed_over_pdsh_names_the_failed_local_rank_of_the_traceback_s_node(tmp_path: Path) -> None:
    """pdsh prefixes each line with its node: the traceback is worker-1's, whose launcher reports one
    failed local rank (worker-0's launcher reports one too, with no traceback: another node's); the
    launcher's time is not the traceback's."""

    def node(name: str, text: str) -> str:
        return "".join(f"{name}: {line}\n" for line in text.splitlines())

    text = node("worker-1", DEEPSPEED.format(traceback=TRACEBACK))
    text += node("worker-0", DEEPSPEED.format(traceback=""))
    first, verdict = _errors(tmp_path, text)
    assert first.startswith(
        "root cause: local rank worker-1:0 (the one process its launcher reports failed): RuntimeError:"
    ), first
    assert first.endswith("the first fatal error in log order"), first
    assert verdict["who"] == "worker-1:0"


def test_deepspeed_s_report_without_local_ranks_or_spawn_lines(tmp_path: Path) -> None:
    """``--no_local_rank``: no local rank in its report. A cut paste with one ``Killing subprocess``
    line: the node ran one worker, the one the report names."""
    no_local = (
        deepspeed_node(2, "").replace("--local_rank=1", "--seed=1").replace("--local_rank=0", "--seed=1")
    )
    first, verdict = _errors(tmp_path, no_local)
    assert first.startswith(
        "root cause: deepspeed: a local rank exited with code 1 [tracebacks_elsewhere]"
    ), first
    assert verdict["who"] is None
    cut = "".join(
        line + "\n" for line in deepspeed_node(1, "", last="5").splitlines() if "spawned" not in line
    )
    first, verdict = _errors(tmp_path, cut)
    assert first.startswith("root cause: 5: deepspeed: local rank 5 exited with code 1"), first
    assert verdict["who"] == "5"


def test_srun_s_task_is_named_as_srun_names_it(tmp_path: Path) -> None:
    """srun without --label prints a task's traceback as it is; its report names the task (not a
    local rank: srun numbers the tasks of the whole step)."""
    first, verdict = _errors(
        tmp_path, "step 10\n" + TRACEBACK + "srun: error: gpu-n03: task 5: Exited with exit code 1\n"
    )
    assert first.startswith(
        "root cause: task 5 (the one process its launcher reports failed): RuntimeError:"
    ), first
    assert (verdict["who"], verdict["local"]) == ("5", False)
