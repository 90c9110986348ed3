"""`rankscope why` on real gloo jobs that hang or lose a rank, each shared by the tests of this module.

- crash-hang: rank 1 raises, a thread of its own keeps its process alive, rank 0 waits in a barrier
  for ever; the traceback is only in the job's output (torchrun's stdout, a regular file here);
- sigkill: rank 1 is SIGKILLed (as the OOM killer does) while rank 0 loops in its data loader;
  torchrun (``--monitor-interval 600``) has not reaped it yet, so its exit status is still there;
- catch-hang: rank 1 logs its exception (``logging.exception``: no rank prefix) and waits in a
  barrier while ranks 0 and 2 wait in all_reduce;
- loader-workers: rank 1 waits for its DataLoader's two workers, stuck in the dataset's
  ``__getitem__``; rank 0 waits in a barrier;
- extra / skip / same-call (tests/fr/fr_job.py, RANKSCOPE_INPROC=1): rank 0 issued an all_reduce the
  other never did, which already returned (no stack shows it; the recorders do); rank 1 never issued
  the last all_reduce; both ranks wait in step's all_reduce, from one line, and only the recorders
  show that rank 1 never issued the one (of another group) that rank 0 waits in.
Every run names its target with --pid (other tests' jobs may run beside these).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import torchrun_job
from tests.support.ranks_job import ranks_job

from rankscope import procfs
from rankscope.demo.launch import LaunchedJob

pytestmark = pytest.mark.slow


def _wait(condition: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _cpu_ticks(pids: list[int]) -> list[str]:
    return [" ".join((procfs.stat_fields(pid) or [])[11:13]) for pid in pids]  # utime, stime


def _wait_quiet(pids: list[int], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    before = _cpu_ticks(pids)
    while True:
        time.sleep(1)
        now = _cpu_ticks(pids)
        if now == before or time.monotonic() > deadline:  # else _desync's own deadline decides
            return
        before = now


def _rank_pid(job: LaunchedJob, rank: int) -> int:
    return next(pid for pid in job.worker_pids() if procfs.environ(pid).get("RANK") == str(rank))


@pytest.fixture(scope="module")
def crash_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    env = dict(os.environ, MY_SERVICE_TOKEN="do-not-keep", OMP_NUM_THREADS="1")
    workdir = tmp_path_factory.mktemp("crash")
    with torchrun_job(workdir, "--scenario", "crash-hang", "--culprit", "1", env=env) as job:
        _wait(
            lambda: b"RuntimeError: bad batch" in job.log_path.read_bytes(),
            "no traceback in the job's output",
        )
        yield job


@pytest.fixture(scope="module")
def crash_bundle(
    crash_job: LaunchedJob, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    """What `rankscope watch` runs: ``why --pid P --out DIR --json``."""
    out = tmp_path_factory.mktemp("bundle") / "why"
    result = run_cli("why", "--pid", str(crash_job.pid), "--out", str(out), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    return out, json.loads(result.stdout)


def test_a_crash_in_the_output_while_the_other_rank_hangs(crash_job: LaunchedJob, crash_bundle: Any) -> None:
    _, document = crash_bundle
    assert document["schema"] == "rankscope.why/1"
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("python_exception", [1])
    assert verdict["location"].startswith("train_step (hang_job.py:")
    first = verdict["evidence"][0]
    assert first["source"].startswith(str(crash_job.log_path) + ":")  # found without asking
    assert "RuntimeError: bad batch on rank 1" in first["text"]
    assert any(
        e["source"] == "stacks" and "rank 0 waits in barrier" in e["text"] for e in verdict["evidence"]
    )
    signals = {s["name"]: s["state"] for s in document["signals"]}
    assert signals["job output"] == "read" and signals["stacks"] == "read"
    states = {s["ranks"]: s["state"] for s in document["ranks"]}
    assert states["0"].startswith("waits in barrier")


def test_the_bundle_is_private_keeps_the_signals_and_no_secret(crash_bundle: Any) -> None:
    out, document = crash_bundle
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.relative_to(out).as_posix() for p in files} >= {
        "why.json",
        "report.txt",
        "environment.txt",
        "stacks/stacks.json",
    }
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
    assert any(p.parent.name == "logs" for p in files)
    environment = (out / "environment.txt").read_text()
    assert "do-not-keep" not in environment and "MY_SERVICE_TOKEN=" not in environment
    assert (
        environment.startswith("# removed as secret-looking: ")
        and "MY_SERVICE_TOKEN" in environment.splitlines()[0]
    )
    assert any("MY_SERVICE_TOKEN" in note for note in document["notes"])


def test_the_bundle_read_back_gives_the_same_verdict(crash_bundle: Any) -> None:
    out, _ = crash_bundle
    result = run_cli("why", "--from", str(out))
    assert result.returncode == 15, result.stderr + result.stdout
    text = result.stdout
    assert "Verdict: rank 1 raised RuntimeError: bad batch on rank 1 at step 1" in text
    assert text.index("Verdict") < text.index("Ranks") < text.index("Signals")


def test_without_its_output_a_rank_whose_main_thread_ended_has_no_place_in_threading(
    crash_job: LaunchedJob, crash_bundle: Any, tmp_path: Path
) -> None:
    """The job's output through a terminal (kept nowhere): the stacks alone blame rank 1, whose main
    thread ended; threading's ``_shutdown`` it waits in is no place of the user's. The bundle's
    kernel.txt also holds a segfault from before the job of a process whose pid rank 1 has now (pids
    are reused): not rank 1's."""
    out, _ = crash_bundle
    copy = tmp_path / "no-output"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("logs"))
    stale = (
        f"2020-01-01T00:00:00,000000+00:00 python3[{_rank_pid(crash_job, 1)}]: segfault at 0 ip "
        "00007f2601f6a219 sp 00007f26017416f8 error 4 in libc.so.6[156219,7f2601e3a000+156000]\n"
    )
    kernel = copy / "kernel.txt"
    kernel.write_text(stale + (kernel.read_text() if kernel.exists() else ""))
    result = run_cli("why", "--from", str(copy), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    verdict = result.json()["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("elsewhere", [1])
    assert verdict.get("location") is None, verdict
    assert "its main thread has ended" in verdict["evidence"][0]["text"]


@pytest.fixture(scope="module")
def killed_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    args = ("--scenario", "skip-barrier", "--culprit", "0")
    workdir = tmp_path_factory.mktemp("killed")
    with torchrun_job(workdir, *args, torchrun_args=["--monitor-interval", "600"]) as job:
        victim = _rank_pid(job, 1)
        os.kill(victim, signal.SIGKILL)
        _wait(lambda: (procfs.stat_fields(victim) or ["?"])[0] == "Z", "the killed rank is not a zombie")
        yield job


def test_a_rank_killed_by_sigkill_is_named_from_its_exit_status(killed_job: LaunchedJob) -> None:
    result = run_cli("why", "--pid", str(killed_job.pid), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    document = json.loads(result.stdout)
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("sigkill", [1])
    assert verdict["evidence"][0]["source"].startswith("exit status (/proc/")
    assert "OOM killer" in verdict["text"] and "OOM killer" in verdict["next_step"]
    states = {s["ranks"]: s["state"] for s in document["ranks"]}
    assert states["1"] == "ended: killed by SIGKILL"
    assert states["0"].startswith("is in load_batch")


@pytest.fixture(scope="module")
def catch_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    workdir = tmp_path_factory.mktemp("catch")
    # three ranks: two in all_reduce against one in a barrier singles rank 1 out (with two, one against
    # one, no majority says which rank is off, and the stacks blame neither)
    with torchrun_job(workdir, "--scenario", "catch-hang", "--culprit", "1", nproc=3) as job:
        _wait(lambda: b"ValueError: loss is NaN" in job.log_path.read_bytes(), "no traceback in the output")
        yield job


def test_an_error_logged_without_a_rank_is_the_rank_the_stacks_single_out(catch_job: LaunchedJob) -> None:
    result = run_cli("why", "--pid", str(catch_job.pid), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    verdict = json.loads(result.stdout)["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("python_exception", [1])
    assert verdict["text"] == (
        "rank 1 raised ValueError: loss is NaN at step 1 "
        "(the output names no rank; the live stacks single out rank 1)"
    )
    assert verdict["location"].startswith("compute_loss (hang_job.py:")
    lines = [(e["source"], e["text"]) for e in verdict["evidence"]]
    assert lines[0][0].startswith(f"{catch_job.log_path}:")
    assert any(t.startswith("rank 1 waits in barrier") for s, t in lines if s == "stacks"), lines
    assert any(t.startswith("ranks 0,2 wait in all_reduce") for s, t in lines if s == "stacks"), lines


@pytest.fixture(scope="module")
def loader_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    workdir = tmp_path_factory.mktemp("loader")
    with torchrun_job(workdir, "--scenario", "loader-workers", "--culprit", "1") as job:
        _wait(lambda: len(list(workdir.glob("loading.*"))) == 2, "the DataLoader workers are not stuck")
        yield job


def test_a_rank_that_waits_for_its_dataloader_workers_is_placed_where_they_are(
    loader_job: LaunchedJob,
) -> None:
    result = run_cli("why", "--pid", str(loader_job.pid), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    document = json.loads(result.stdout)
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("elsewhere", [1])
    assert verdict["location"].startswith("read_sample (hang_job.py:"), verdict
    first = verdict["evidence"][0]["text"]
    assert "called from train_step (hang_job.py:" in first  # the rank's own line: its for loop
    workers = first.split("it waits for its DataLoader workers: ", 1)[1].split(", ")
    assert len(workers) == 2 and all(" is in read_sample (hang_job.py:" in w for w in workers), first
    signals = {s["name"]: (s["state"], s["detail"]) for s in document["signals"]}
    assert signals["DataLoader workers"][0] == "read"


def _desync(pids: list[int]) -> dict[str, Any]:
    """why's document once the recorders show the divergence and the job has settled (the ranks hang
    within seconds; before that, on a loaded machine, a read can fall between two collectives of a
    rank, and the recorders then hold one entry less than they will): the same verdict twice. The
    first run waits until no rank used CPU for a second (torch imported, every rank blocked): each
    run before that read a job still starting, and cost as much as the one that counts."""
    _wait_quiet(pids)
    args = [a for pid in pids for a in ("--pid", str(pid))]
    deadline = time.monotonic() + 120
    previous: Any = None
    while True:
        result = run_cli("why", *args, "--json")
        document: dict[str, Any] = json.loads(result.stdout)
        verdict = document.get("verdict") or {}
        key = (verdict.get("cause"), verdict.get("ranks"), verdict.get("location"))
        settled = key[0] == "collective_desync" and key == previous
        if settled or time.monotonic() > deadline:
            assert result.returncode == 15, result.stderr
            return document
        previous = key
        time.sleep(1)


@pytest.fixture(scope="module")
def extra_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    pytest.importorskip("torch")
    with ranks_job(tmp_path_factory.mktemp("rt-extra"), "extra", 2) as pids:
        yield pids


def test_an_extra_collective_that_already_returned_is_seen_by_the_recorders(extra_job: list[int]) -> None:
    document = _desync(extra_job)
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("collective_desync", [0])
    assert verdict["location"].startswith("log_global_loss (fr_job.py:")
    assert verdict["evidence"][0]["source"] == "flight recorders"
    # no live stack shows it: it returned
    frames = [f["function"] for g in document["stacks"]["groups"] for f in g["frames"]]
    assert "log_global_loss" not in frames


@pytest.fixture(scope="module")
def skip_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    pytest.importorskip("torch")
    with ranks_job(tmp_path_factory.mktemp("rt-skip"), "skip", 2) as pids:
        yield pids


def test_a_rank_that_never_issued_the_collective(skip_job: list[int]) -> None:
    document = _desync(skip_job)
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("collective_desync", [1])
    assert "evaluate (fr_job.py:" in verdict["location"]
    assert any(e["source"] == "stacks" for e in verdict["evidence"])
    # its stacks show it in its own code, not in another collective: no "desync" of code paths
    assert verdict["text"] == (
        "rank 1 never issued the collective the other ranks wait in: its stacks show it elsewhere, in no collective"
    ), verdict["text"]


@pytest.fixture(scope="module")
def same_call_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    pytest.importorskip("torch")
    with ranks_job(tmp_path_factory.mktemp("rt-same"), "same-call", 2) as pids:
        yield pids


def test_every_rank_waits_in_one_collective_and_the_recorders_name_the_rank_that_never_issued_it(
    same_call_job: list[int],
) -> None:
    """Both ranks wait in step's all_reduce, reached from the same line: the stacks alone blame no
    rank; the recorders show that rank 1 never issued the all_reduce of the group rank 0 waits in."""
    document = _desync(same_call_job)
    states = {s["ranks"]: s["state"] for s in document["ranks"]}
    assert list(states) == ["0-1"] and "all_reduce" in states["0-1"], states  # one state: no culprit there
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("collective_desync", [1])
    assert verdict["text"] == "rank 1 never issued a collective that other ranks issued (a collective desync)"
    first = verdict["evidence"][0]
    assert first["source"] == "flight recorders"
    assert first["text"].startswith("rank 1 never issued all_reduce #2 from step (fr_job.py:"), first["text"]
    assert "which rank 0 issued (waiting)" in first["text"]
    assert "all_waiting" in {h["cause"] for h in document["hypotheses"]}  # what the stacks alone say


#: The two places a DDP rank waits with no Python frame of the collective: the first step's backward
#: (the gradient all_reduce, from the autograd engine) and the second step's forward (the reducer's
#: one-time bucket rebuild), each with the label `stacks` gives it.
DDP_WAITS = {
    "ddp-backward": "backward (torch.autograd: DDP's gradient all_reduce runs inside it)",
    "ddp-forward": "forward (DDP: the bucket rebuild of its second iteration is a collective)",
}


@pytest.fixture(scope="module", params=sorted(DDP_WAITS))
def ddp_job(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[str, LaunchedJob]]:
    workdir = tmp_path_factory.mktemp("ddp")
    with torchrun_job(workdir, "--scenario", request.param, "--culprit", "1", nproc=3) as job:
        yield request.param, job


def test_ranks_waiting_inside_ddp_single_out_the_one_elsewhere(ddp_job: tuple[str, LaunchedJob]) -> None:
    """DDP runs these collectives from C++ (on gloo the backward pass blocks in the autograd engine; the
    second forward in the bucket rebuild): no Python frame of a collective. The rank that never got
    there is the one elsewhere."""
    scenario, job = ddp_job
    verdicts: list[Any] = []

    def settled() -> bool:  # ranks 0 and 2 reach the wait after DDP's set-up: slow on a loaded machine
        verdicts.append(run_cli("why", "--pid", str(job.pid), "--json").json()["verdict"])
        # Also in its data loader: on a loaded machine rank 1 can still be in DDP's construction (after
        # its collectives) while the others already wait in the first step; "elsewhere" there is true too.
        return (
            verdicts[-1] is not None
            and verdicts[-1]["text"].startswith("rank 1 is elsewhere")
            and verdicts[-1]["location"].startswith("load_batch")
        )

    try:
        _wait(settled, f"the ranks never waited inside DDP ({scenario})", timeout=120.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the last verdicts: {verdicts[-3:]}") from None
    verdict = verdicts[-1]
    assert verdict["text"] == "rank 1 is elsewhere while the other ranks wait in a collective", verdict
    assert verdict["location"] == "load_batch (hang_job.py:68)", verdict
    stacks = run_cli("stacks", "--pid", str(job.pid)).stdout
    assert f"ranks 0,2 wait in {DDP_WAITS[scenario]}" in stacks, stacks


#: A 3-rank FSDP2 job (``fully_shard``, gloo): every rank runs one step; rank 1 then sleeps in its data
#: loader while ranks 0 and 2 wait in the next forward's parameter all-gather (torch 2.13's
#: ``all_gather_single``, which `stacks` did not know: `why` said nothing was wrong).
FSDP2_JOB = """\
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


def load_batch(step, rank):
    if rank == 1 and step == 1:
        Path(os.environ["RANKSCOPE_READY_DIR"], "ready.1").touch()
        while True:
            time.sleep(1)
    return torch.randn(4, 8)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    fully_shard(model)
    for step in range(2):
        x = load_batch(step, rank)
        if step == 1:
            Path(os.environ["RANKSCOPE_READY_DIR"], f"ready.{rank}").touch()
        model(x).sum().backward()


main()
"""


@pytest.fixture(scope="module")
def fsdp2_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 needs torch.distributed.fsdp")
    from torch.distributed import fsdp

    if not hasattr(fsdp, "fully_shard"):
        pytest.skip("this torch has no FSDP2 (fully_shard)")
    workdir = tmp_path_factory.mktemp("fsdp2")
    script = workdir / "fsdp2_job.py"
    script.write_text(FSDP2_JOB)
    with torchrun_job(workdir, script=script, nproc=3) as job:  # stops the whole tree, whatever happened
        yield job


def test_ranks_waiting_in_fsdp2_s_all_gather_single_out_the_one_elsewhere(fsdp2_job: LaunchedJob) -> None:
    verdicts: list[Any] = []

    def settled() -> bool:  # ranks 0 and 2 mark themselves ready just before the forward's all-gather
        verdicts.append(run_cli("why", "--pid", str(fsdp2_job.pid), "--json").json()["verdict"])
        return (  # rank 1 in its data loader, not on its way there (see the DDP test above)
            verdicts[-1] is not None
            and verdicts[-1]["text"].startswith("rank 1 is elsewhere")
            and verdicts[-1]["location"].startswith("load_batch")
        )

    try:
        _wait(settled, "the ranks never waited in FSDP2's all-gather", timeout=120.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the last verdicts: {verdicts[-3:]}") from None
    lines = FSDP2_JOB.splitlines()
    sleep, forward = (
        lines.index(text) + 1 for text in ("            time.sleep(1)", "        model(x).sum().backward()")
    )
    verdict = verdicts[-1]
    assert verdict["text"] == "rank 1 is elsewhere while the other ranks wait in a collective", verdict
    assert verdict["location"] == f"load_batch (fsdp2_job.py:{sleep})", verdict
    stacks = run_cli("stacks", "--pid", str(fsdp2_job.pid)).stdout
    expected = (
        f"ranks 0,2 wait in all_gather_single (torch.distributed) called from main (fsdp2_job.py:{forward})"
    )
    assert expected in stacks, stacks


def test_a_rank_stopped_by_sigstop_is_named_stopped_not_gone(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Rank 1 stopped (SIGSTOP: a debugger, Ctrl-Z of one process, a cgroup freezer) while rank 0
    waits in a barrier for it: `why` said "rank 1 is gone" and listed it "not found", though `stacks`
    said it was stopped; now the verdict is the stopped rank, with the command that resumes it."""
    workdir = tmp_path_factory.mktemp("stopped")
    with torchrun_job(workdir, "--scenario", "skip-barrier", "--culprit", "1") as job:
        stopped = _rank_pid(job, 1)
        os.kill(stopped, signal.SIGSTOP)
        try:
            _wait(lambda: (procfs.stat_fields(stopped) or ["?"])[0] == "T", "rank 1 is not stopped")
            result = run_cli("why", "--pid", str(job.pid), "--json")
        finally:
            os.kill(stopped, signal.SIGCONT)
    doc = result.json()
    verdict = doc["verdict"]
    assert verdict["cause"] == "rank_stopped" and verdict["ranks"] == [1], verdict
    assert f"kill -CONT {stopped}" in str(verdict), verdict
    states = {s["state"]: s["ranks"] for s in doc["ranks"]}
    assert states.get(f"stopped (SIGSTOP): resume it with kill -CONT {stopped}") == "1", states


def _ppid(pid: int) -> int:
    entry = procfs.process(pid)
    return entry.ppid if entry is not None else -1


def test_one_rank_of_a_job_whose_launcher_was_killed_brings_its_peers(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """torchrun killed with SIGKILL: its ranks live on, children of init, still hung. `why --pid` of
    one of them named the others "gone" (the job was that one process); it now finds the ranks of its
    rendezvous, as `stacks` does without a target, and names the one elsewhere."""
    workdir = tmp_path_factory.mktemp("orphans")
    with torchrun_job(workdir, "--scenario", "lock", "--culprit", "1", nproc=3) as job:
        workers = job.worker_pids()
        waiting = _rank_pid(job, 0)
        os.kill(job.pid, signal.SIGKILL)
        try:
            _wait(
                lambda: procfs.stat_fields(job.pid) is None or procfs.stat_fields(job.pid)[0] == "Z",
                "torchrun",
            )
            _wait(lambda: all(_ppid(pid) != job.pid for pid in workers), "the ranks were not reparented")
            doc = run_cli("why", "--pid", str(waiting), "--json").json()
        finally:
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    verdict = doc["verdict"]
    assert verdict["ranks"] == [1] and verdict["cause"] == "elsewhere", verdict
    assert "gone" not in json.dumps(doc["ranks"]) and "not found" not in json.dumps(doc["ranks"]), doc[
        "ranks"
    ]
