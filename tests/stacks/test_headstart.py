"""A plain `rankscope stacks` starts its first dumps before the job model is imported
(rankscope.stacks.headstart): which command lines, which processes, and that the report is the one a
run without the head start prints.

The job: a launcher script named ``torchrun`` (so discovery reads it as torchrun's) that starts
bench/fake_job.py's plain-Python workers with torchrun's rank variables, more of them than dumps run
at once here, no torch (cheap on two cores).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rankscope import procfs
from rankscope.lifetime import tool_path
from rankscope.procs import ProcessTable, discover, workers_of
from rankscope.stacks.headstart import begin, claim, guess, plain_pids
from rankscope.stacks.local import run_local
from rankscope.stacks.options import StacksOptions
from rankscope.stacks.pyspy_cmd import default_parallelism

FAKE_JOB = Path(__file__).resolve().parents[2] / "bench" / "fake_job.py"
RANKSCOPE = [sys.executable, "-m", "rankscope"]
PYSPY = tool_path("py-spy") or "py-spy"


#: The launcher: N workers of fake_job.py, rank variables set as torchrun sets them.
LAUNCHER = """
import os, subprocess, sys
n = int(sys.argv[2])
kids = [
    subprocess.Popen([sys.executable, sys.argv[1], "--worker", "--culprit", "1"], env=dict(
        os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
        TORCHELASTIC_RUN_ID="headstart"))
    for r in range(n)
]
for kid in kids:
    kid.wait()
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, list[int]]]:
    """(launcher pid, worker pids): more workers than dumps run at once, all up."""
    script = tmp_path_factory.mktemp("launcher") / "torchrun"
    script.write_text(LAUNCHER)
    nproc = default_parallelism() + 2
    launcher = subprocess.Popen(
        [sys.executable, str(script), str(FAKE_JOB), str(nproc)], start_new_session=True
    )
    try:
        workers: list[int] = []
        for _ in range(200):
            table = ProcessTable()
            workers = table.launched(launcher.pid)
            if len(workers) == nproc and all(procfs.process(p) is not None for p in workers):
                break
            time.sleep(0.05)
        assert len(workers) == nproc
        for pid in workers:  # each in its final frame (barrier, or the culprit's load_batch)
            for _ in range(200):
                dump = subprocess.run([PYSPY, "dump", "--pid", str(pid)], capture_output=True, text=True)
                if "barrier" in dump.stdout or "load_batch" in dump.stdout:
                    break
                time.sleep(0.05)
        yield launcher.pid, workers
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


@pytest.mark.parametrize(
    ("words", "pids"),
    [
        (["stacks"], []),
        (["stacks", "--pid", "12", "--no-color", "--json", "--pid", "7", "--color"], [12, 7]),
        (["stacks", "--samples", "3"], None),
        (["stacks", "--native"], None),
        (["stacks", "--pid"], None),
        (["stacks", "--pid", "-3"], None),
        (["stacks", "--pid", "٣"], None),  # a digit to str.isdigit, not to click
        (["stacks", "--pid=3"], None),
        (["stacks", "--local", "--json"], None),
        (["why"], None),
        ([], None),
    ],
)
def test_only_command_lines_that_change_nothing_about_a_dump_start_early(
    words: list[str], pids: list[int] | None
) -> None:
    assert plain_pids(words) == pids


FIRST_DUMPS = """
import json, sys
from rankscope.stacks.headstart import begin, claim
begin(sys.argv[1:])
head = claim()
runs = {} if head is None else head.runs
print(json.dumps({"pids": sorted(runs), "loaded": [m for m in ("typing", "dataclasses", "rankscope.model",
    "rankscope.procs") if m in sys.modules]}))
if head is not None:
    head.cancel()
"""


def test_the_first_dumps_start_before_the_job_model_is_imported(job: tuple[int, list[int]]) -> None:
    launcher, workers = job
    run = subprocess.run(
        [sys.executable, "-c", FIRST_DUMPS, "stacks", "--pid", str(launcher), "--no-color"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen == {"pids": workers[: default_parallelism()], "loaded": []}


def test_the_guess_is_what_discovery_dumps(job: tuple[int, list[int]]) -> None:
    launcher, workers = job
    table = ProcessTable()
    assert guess(table, [launcher]) == [w.pid for w in workers_of(launcher, table).workers] == workers
    assert guess(table, [workers[2]]) == [workers[2]]
    assert guess(table, [os.getpid(), 2**22 + 1]) == []  # no rank, no such process
    # With no pid: every launched worker on the node (other tests' jobs too), all of them targets.
    everything = guess(table, [])
    assert set(workers) <= set(everything)
    assert set(everything) <= {w.pid for found in discover(table).jobs for w in found.workers}


def test_a_run_with_a_head_start_reports_what_one_without_does(job: tuple[int, list[int]]) -> None:
    launcher, workers = job
    argv = [*RANKSCOPE, "stacks", "--pid", str(launcher), "--json"]
    documents = []
    for extra in ({}, {"RANKSCOPE_NO_HEADSTART": "1"}):
        run = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **extra}, timeout=120)
        assert run.returncode == 0, run.stderr
        document = json.loads(run.stdout)
        document.pop("seconds", None)
        documents.append(document)
    assert documents[0] == documents[1]
    assert sorted(p["pid"] for p in documents[0]["processes"]) == workers
    assert all(p["dumped"] for p in documents[0]["processes"])


def test_the_pipeline_takes_over_the_dumps_and_cancels_a_wrong_guess(job: tuple[int, list[int]]) -> None:
    launcher, workers = job
    begin(["stacks", "--pid", str(launcher)])
    head = claim()
    assert head is not None and sorted(head.runs) == workers[: default_parallelism()]
    runs = head.hand_over(workers[:1])  # as if the full rules had kept one worker only
    assert list(runs) == workers[:1] and head.runs == {}
    head.runner.finish_all()
    assert runs[workers[0]].returncode == 0 and b'"thread_name"' in runs[workers[0]].stdout
    for pid in workers:  # the cancelled dumps left their processes running
        entry = procfs.process(pid)
        assert entry is not None and entry.state not in ("T", "t")

    begin(["stacks", "--pid", str(launcher)])  # now the whole pipeline, in this process
    result = run_local(StacksOptions(pids=(launcher,)))
    assert claim() is None  # taken, once
    assert sorted(p.pid for p in result.report.processes if p.dumped) == workers
    assert result.report.failures == []


#: The console entry with Runner.spawn noting, at the first dump, which of these modules were in.
CONSOLE_FIRST_SPAWN = """
import sys
from rankscope.stacks import runner
spawn = runner.Runner.spawn
def noted(self, *args, **kwargs):
    if not getattr(runner, "seen", False):
        runner.seen = True
        heavy = ("typing", "dataclasses", "rankscope.model", "rankscope.procs", "rankscope.cli.stacks_request")
        sys.stderr.write("at first dump: " + ",".join(m for m in heavy if m in sys.modules) + "\\n")
    return spawn(self, *args, **kwargs)
runner.Runner.spawn = noted
from rankscope.cli.node import main
main(sys.argv[1:])
"""


def test_the_console_entry_dumps_before_it_reads_the_command_line_in_full(job: tuple[int, list[int]]) -> None:
    launcher, workers = job
    run = subprocess.run(
        [sys.executable, "-c", CONSOLE_FIRST_SPAWN, "stacks", "--pid", str(launcher), "--no-color"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "at first dump: \n" in run.stderr
    assert f"{len(workers)} of {len(workers)} processes dumped" in run.stdout
