"""`rankscope watch` on real 2-rank torchrun jobs (gloo, CPU): a hang captured before its collective
timeout kills the job; a crash whose survivor leaves its stacks at teardown; the same crash followed
by an elastic restart whose straggler is captured (and whose capture skips what the first attempt
left); a job that finishes normally while the watcher that started it is SIGKILLed (another watcher
attached to it sees the normal end); and a rank that fails on another "node", seen only through
the output file both nodes write into.

Each test runs the watcher as a user would (``python -m rankscope watch ... -- torchrun ...``), its
stdout and stderr in files; every process it starts carries a mark and is SIGKILLed in teardown.
The capture command is ``rankscope why`` where this rankscope has it, else ``rankscope stacks``:
the assertions read what both leave (the raw stacks in the capture directory, the culprit ranks
of the JSON document in the index line).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.leftovers import kill_marked, marked_env, wait_for
from tests.support.sshd import free_port

JOB = Path(__file__).with_name("watch_job.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]

pytest.importorskip("torch.distributed")


@dataclass
class WatchRun:
    process: subprocess.Popen[bytes]
    workdir: Path
    out: Path
    logs: tuple[str, str]

    @property
    def stdout(self) -> str:
        return (self.workdir / self.logs[0]).read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return (self.workdir / self.logs[1]).read_text(errors="replace")

    def wait(self, timeout: float = 150) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"watch did not end: {self.stderr[-3000:]}") from None

    def index(self) -> list[dict[str, object]]:
        path = self.out / "index.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def captured_text(self, name: str) -> str:
        """Every file under the capture directory ``name``, joined (raw stacks, documents, dumps)."""
        texts = []
        for path in sorted((self.out / name).rglob("*")):
            if path.is_file():
                texts.append(path.read_text(errors="replace"))
        return "\n".join(texts)

    def launcher_pid(self) -> int:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return int(children[0])


@pytest.fixture
def watch(tmp_path: Path) -> Iterator[object]:
    marks: list[str] = []
    runs: list[WatchRun] = []

    def start(
        *watch_args: str,
        scenario: str = "",
        job_args: tuple[str, ...] = (),
        out: str = "caps",
        torchrun_args: tuple[str, ...] = (),
        launcher: tuple[str, ...] = tuple(TORCHRUN),
    ) -> WatchRun:
        env, mark = marked_env(OMP_NUM_THREADS="1")
        marks.append(mark)
        argv = [sys.executable, "-m", "rankscope", "watch", "--out", str(tmp_path / out), "--interval", "0.5"]
        argv += watch_args
        if scenario:  # else the watcher attaches (--pid in watch_args)
            argv += ["--", *launcher, *torchrun_args, str(JOB), "--scenario", scenario, *job_args]
        logs = ("stdout.log", "stderr.log") if scenario else (f"{out}.stdout.log", f"{out}.stderr.log")
        with open(tmp_path / logs[0], "ab") as stdout, open(tmp_path / logs[1], "ab") as stderr:
            process = subprocess.Popen(
                argv, cwd=tmp_path, env=env, stdout=stdout, stderr=stderr, start_new_session=True
            )
        run = WatchRun(process, tmp_path, tmp_path / out, logs)
        runs.append(run)
        return run

    yield start
    for mark in marks:
        kill_marked(mark)
    for run in runs:
        if run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGKILL)
        run.process.wait()


def test_hang_is_captured_before_the_collective_timeout_kills_the_job(watch) -> None:  # type: ignore[no-untyped-def]
    run = watch("--stall", "4", "--straggler-steps", "0", scenario="hang", job_args=("--timeout", "20"))
    code = run.wait()
    assert code == 1, run.stderr[-3000:]  # torchrun's own code: rank 0's collective timed out
    stalls = [entry for entry in run.index() if entry["reason"] == "stall"]
    assert len(stalls) == 1, run.index()
    assert stalls[0]["ranks"] == [1], stalls[0]  # the culprit, from the capture's JSON
    text = run.captured_text(str(stalls[0]["dir"]))
    # Both ranks were alive when it was taken: the culprit in its loop, rank 0 in the collective.
    assert "load_batch_forever" in text and "train_step" in text
    line = next(line for line in run.stderr.splitlines() if line.startswith("rankscope watch: stall"))
    assert str(stalls[0]["dir"]) in line and "culprit rank 1" in line
    assert "Timed out" in run.stderr or "timed out" in run.stderr.lower()  # the timeout came after


def test_crash_leaves_the_survivors_stacks_of_the_teardown(watch) -> None:  # type: ignore[no-untyped-def]
    """Rank 1 crashes while rank 0 evaluates; torchrun ends rank 0 with SIGTERM within its 0.1 s monitor
    interval, faster than any outside look: rank 0's in-process handler dumps its stacks."""
    run = watch("--stall", "30", "--inproc", scenario="crash")
    assert run.wait() == 1, run.stderr[-3000:]
    deaths = [entry for entry in run.index() if entry["reason"] == "death"]
    assert len(deaths) == 1, run.index()
    assert deaths[0]["trigger_ranks"] == [1] and "rank 1" in str(deaths[0]["trigger"])
    # Its own traceback is the verdict: torchrun, alive while it tears the job down, has printed its
    # "failed (exitcode: 1)" line, which `why` alone takes for a restart (and reads what follows);
    # the watcher, which saw no restart, says where this attempt's output starts.
    assert deaths[0]["verb"] == "stacks" or "RuntimeError: bad batch" in str(deaths[0]["verdict"]), deaths
    dumps = sorted((run.out / str(deaths[0]["dir"]) / "inproc").glob("*.term"))
    survivor = [p for p in dumps if ".rank-0." in p.name]
    assert survivor, (dumps, run.stderr[-2000:])
    assert "in evaluate" in survivor[0].read_text()  # where torchrun's SIGTERM found rank 0
    assert oct(survivor[0].stat().st_mode & 0o777) == "0o600"
    assert "rankscope watch: death" in run.stderr


def test_elastic_restart_is_followed_and_its_straggler_captured(watch) -> None:  # type: ignore[no-untyped-def]
    """The same crash under --max-restarts 1: torchrun starts both ranks again (new pids); the second
    attempt straggles (rank 1 ten times slower) and finishes: torchrun's 0 comes back. The first
    attempt leaves rank 0's SIGTERM dump (--inproc) and each rank's output under --log-dir's
    attempt_0/ (--tee): the straggler capture reads neither."""
    run = watch(
        "--stall", "30", "--straggler-steps", "5", "--inproc", scenario="crash",
        torchrun_args=("--max-restarts", "1", "--log-dir", "tlogs", "--tee", "3"),
    )  # fmt: skip
    assert run.wait() == 0, run.stderr[-3000:]
    entries = run.index()
    assert [entry["reason"] for entry in entries] == ["death", "straggler"], entries
    death, straggler = entries
    assert death["trigger_ranks"] == [1]
    assert straggler["trigger_ranks"] == [1]  # a rank of the new workers: they were found and watched
    assert "local_step" in run.captured_text(str(straggler["dir"]))
    # The straggler capture reads the job's output from where the first attempt's ended: the crash of
    # that attempt is not its verdict.
    argv = json.loads((run.out / str(straggler["dir"]) / "watch.json").read_text())["argv"]
    assert straggler["verb"] == "stacks" or "--log-from" in argv, argv
    assert "RuntimeError" not in str(straggler["verdict"]), straggler
    assert "RuntimeError" in str(death["verdict"]) or death["verb"] == "stacks", death  # that one's own
    assert (run.workdir / "done.0").exists() and (run.workdir / "done.1").exists()
    # What the first attempt left: rank 1's traceback in attempt_0/, rank 0's SIGTERM dump (kept in
    # the death capture when the job ended).
    first_logs = list(run.workdir.glob("tlogs/*/attempt_0/1/stderr.log"))
    assert first_logs and "RuntimeError" in first_logs[0].read_text(), first_logs
    assert list((run.out / str(death["dir"]) / "inproc").glob("*.rank-0.*.term")), run.stderr[-2000:]
    if straggler["verb"] == "why":
        assert "--since" in argv, argv
        document = json.loads((run.out / str(straggler["dir"]) / "watch-document.json").read_text())
        assert [f for f in document["rank_files"] if f["kind"] == "term"] == [], document["rank_files"]
        sources = [str(f["source"]) for f in document["findings"]]
        assert not [s for s in sources if "attempt_0" in s], sources


def test_a_normal_job_outlives_its_killed_watcher_and_leaves_no_capture(watch) -> None:  # type: ignore[no-untyped-def]
    first = watch("--stall", "30", scenario="normal", out="first")
    wait_for(lambda: "rank 0 step 3" in first.stdout, 120, "the job's first steps")
    launcher = first.launcher_pid()
    # The job writes into the file the watcher was given, not into a pipe of the watcher's.
    assert os.readlink(f"/proc/{launcher}/fd/1") == str(first.workdir / "stdout.log")
    second = watch("--pid", str(launcher), "--stall", "30", out="second")
    os.kill(first.process.pid, signal.SIGKILL)
    assert second.wait() == 0, second.stderr[-3000:]
    assert (first.workdir / "done.0").exists() and (first.workdir / "done.1").exists()
    assert "rank 1 step 39" in first.stdout
    assert first.index() == [] and second.index() == []
    assert [p.name for p in second.out.iterdir()] == []


def test_a_rank_that_fails_on_another_node_is_captured_from_the_jobs_output(watch) -> None:  # type: ignore[no-untyped-def]
    """Two torchrun "nodes" of one job (static rendezvous, one rank each): the watcher runs node 0;
    node 1's launcher writes into the same output file, as srun or a batch script gathers every
    node's lines into one file on the first node. Node 1 is not under the watcher's launcher, so
    its processes are never looked at, exactly as on another machine: only its lines in the output
    can tell the watcher that rank 1 raised. Rank 0 sits in evaluate (no collective, so nothing on
    node 0 fails or notices); the death capture takes it there, and --then kill ends node 0."""
    port = free_port()

    def node(rank: int) -> list[str]:
        return [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
            "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
        ]  # fmt: skip

    run = watch("--stall", "30", "--then", "kill", scenario="crash", launcher=tuple(node(0)))
    env, mark = marked_env(OMP_NUM_THREADS="1")
    with open(run.workdir / run.logs[1], "ab") as shared:  # O_APPEND: both nodes' lines, whole
        other = subprocess.Popen(
            [*node(1), str(JOB), "--scenario", "crash"],
            cwd=run.workdir, env=env, stdout=shared, stderr=shared, start_new_session=True,
        )  # fmt: skip
    try:
        assert other.wait(120) == 1  # node 1's torchrun: its rank raised
        code = run.wait()
    finally:
        kill_marked(mark)  # node 1's launcher and its rank
        other.wait()
    deaths = [entry for entry in run.index() if entry["reason"] == "death"]
    assert len(deaths) == 1, (run.index(), run.stderr[-3000:])
    death = deaths[0]
    assert death["trigger_ranks"] == [1], death
    assert "RuntimeError: bad batch at step 3" in str(death["trigger"]), death
    # rank 0, alive on this node when the capture was taken
    assert "evaluate" in run.captured_text(str(death["dir"])), run.stderr[-2000:]
    assert "--then kill: SIGTERM to the job" in run.stderr
    assert code != 0


def test_a_rank_that_returns_early_is_named_and_its_peers_failures_make_one_death(watch) -> None:  # type: ignore[no-untyped-def]
    """Three ranks: rank 1 returns before the last barrier (exit 0, which torchrun does not report),
    the others' barrier fails ("Connection closed by peer"), torchrun SIGTERMs whoever is left. Seen
    on real jobs: a death capture per failing or stopped rank, named after the victims only. Now one
    death, whose trigger says rank 1 went first."""
    three = tuple(TORCHRUN[:-1]) + ("3",)
    run = watch("--stall", "30", scenario="early", launcher=three)
    assert run.wait() == 1, run.stderr[-3000:]
    deaths = [entry for entry in run.index() if entry["reason"] == "death"]
    assert len(deaths) == 1, (run.index(), run.stderr[-3000:])
    trigger = str(deaths[0]["trigger"])
    assert "rank 1 (pid" in trigger and "while the others still ran" in trigger, trigger
    assert 1 not in deaths[0]["trigger_ranks"], deaths[0]  # the ranks that failed, not the one that left
    # the capture reads output and stacks, where an exit 0 leaves no trace: the watcher's own sight of
    # it is the death's lead where the capture names no culprit (it said only "no cause named")
    named = deaths[0]["ranks"] == [1] or "rank 1 (pid" in str(deaths[0].get("lead"))
    assert named, (deaths[0], run.stderr[-3000:])


@pytest.mark.parametrize("scenario", ["evaluate", "evaluate-python"])
def test_a_long_evaluation_on_one_rank_is_captured_but_not_killed(watch, scenario: str) -> None:  # type: ignore[no-untyped-def]
    """Rank 0 evaluates in one native call per line while rank 1 waits in a barrier: quiet for
    --stall, stacks unchanged, `why` finds rank 0 elsewhere while the other waits, as in a hang.
    Seen on a real job: --then kill ended it. Rank 0 ran on the CPU between the samples (a rank
    stuck in a sleep or a wait does not): it is told, and once the capture is written (the kill
    would come with it) the evaluation ends and the job runs to its end. An evaluation in Python
    (``evaluate-python``) moves rank 0's stack between the samples: it used to deny the stall for as
    long as it ran (a real job's rank looping in Python was never captured), while rank 1 sat in its
    barrier; the rank that waits in a collective confirms it."""
    run = watch("--stall", "2", "--then", "kill", "--straggler-steps", "0", scenario=scenario)
    wait_for(lambda: run.index() or run.process.poll() is not None, 120, "the capture", lambda: run.stderr)
    (run.workdir / "end-eval").touch()
    assert run.wait() == 0, run.stderr[-3000:]
    stalls = [entry for entry in run.index() if entry["reason"] == "stall"]
    assert len(stalls) == 1, (run.index(), run.stderr[-3000:])
    assert stalls[0]["verb"] == "why" and stalls[0]["ranks"] == [0] and "working" in stalls[0], stalls[0]
    assert "rank 0 ran on the CPU throughout the samples" in run.stderr
    assert "--then kill: SIGTERM" not in run.stderr
    # never denied by rank 0's moving stack alone while rank 1 sat in its barrier (a denial while rank 1
    # too was still on its way to the barrier, both stacks moving, is right: seen under CI's load)
    assert not re.search(r"stacks of pids \d+ moved\)", run.stderr), run.stderr[-3000:]
    assert (run.workdir / "done.0").exists() and (run.workdir / "done.1").exists()


def test_a_spawn_job_s_stuck_rank_is_captured_by_its_start_order(tmp_path: Path) -> None:
    """A job started with torch.multiprocessing.spawn: its children carry no rank variable (their rank
    is their start order). The watcher used to find no worker at all and never saw the hang; it now
    watches them as `stacks` finds them, and rank 1, stuck in its data loading, is the stall's culprit."""
    script = Path(__file__).with_name("spawn_job.py")
    env, mark = marked_env(OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "rankscope", "watch", "--out", str(tmp_path / "caps"), "--interval", "0.5"]
    argv += ["--stall", "5", "--then", "kill", "--", sys.executable, str(script), str(free_port())]
    log = tmp_path / "watch.log"
    with open(log, "wb") as handle:
        watcher = subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=handle, stderr=handle, start_new_session=True
        )
    try:
        watcher.wait(180)
        index = tmp_path / "caps" / "index.jsonl"
        entries = [json.loads(line) for line in index.read_text().splitlines()] if index.exists() else []
        stalls = [e for e in entries if e["reason"] == "stall"]
        assert stalls and stalls[0]["ranks"] == [1], (entries, log.read_text(errors="replace")[-3000:])
        assert "read_shard_forever" in (tmp_path / "caps" / str(stalls[0]["dir"]) / "report.txt").read_text()
    finally:
        kill_marked(mark)
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
        watcher.wait()


def test_a_spawn_job_that_fails_and_ends_at_once_is_read_from_its_output(tmp_path: Path) -> None:
    """Rank 1 of an mp.spawn job raises; mp.spawn ends rank 0 and the parent within moments, before a
    capture of the live job can run, and the children's exit codes cannot be read from outside. The
    job's failure still gets a capture that reads its output and names rank 1's error."""
    script = Path(__file__).with_name("spawn_job.py")
    env, mark = marked_env(OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "rankscope", "watch", "--out", str(tmp_path / "caps"), "--interval", "0.5"]
    argv += ["--stall", "60", "--", sys.executable, str(script), str(free_port()), "raise"]
    log = tmp_path / "watch.log"
    with open(log, "wb") as handle:
        watcher = subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=handle, stderr=handle, start_new_session=True
        )
    try:
        assert watcher.wait(180) == 1, log.read_text(errors="replace")[-3000:]
        index = tmp_path / "caps" / "index.jsonl"
        entries = [json.loads(line) for line in index.read_text().splitlines()] if index.exists() else []
        named = [e for e in entries if "bad record in shard 3" in str(e["verdict"])]
        assert named and named[0]["ranks"] == [1], (entries, log.read_text(errors="replace")[-3000:])
    finally:
        kill_marked(mark)
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
        watcher.wait()
