"""`rankscope stacks` against real hung torchrun jobs: what a user sees."""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import torchrun_job

from rankscope.demo.launch import LaunchedJob
from rankscope.procs import ProcessTable, find_jobs
from rankscope.stacks.collect import Target, collect
from rankscope.stacks.pstate import proc_state
from rankscope.stacks.pyspy_cmd import find_pyspy

pytestmark = pytest.mark.slow


def _finding(doc: dict, kind: str) -> list[dict]:
    return [f for f in doc["diagnosis"]["findings"] if f["kind"] == kind]


def test_lock_deadlock_names_rank_and_collective(lock_job: LaunchedJob) -> None:
    result = run_cli("stacks", "--pid", str(lock_job.pid), "--json")
    assert result.returncode == 0, result.stderr
    doc = result.json()
    assert doc["schema"] == "rankscope.stacks/1"
    assert doc["diagnosis"]["divergent_ranks"] == [2]
    (waiting,) = _finding(doc, "waiting")
    assert waiting["ranks"] == "0-1,3"
    assert waiting["collective"].startswith("all_reduce (torch.distributed")
    assert waiting["called_from"]["function"] == "sync_gradients"
    (elsewhere,) = _finding(doc, "elsewhere")
    assert elsewhere["ranks"] == "2"
    assert elsewhere["innermost"]["function"] == "update_index"
    ranks = sorted(p["rank"]["rank"] for p in doc["processes"])
    assert ranks == [0, 1, 2, 3]
    assert {p["rank"]["launcher"] for p in doc["processes"]} == {"torchrun"}


def test_discovery_without_target_finds_the_job(lock_job: LaunchedJob) -> None:
    jobs = [j for j in find_jobs(ProcessTable()) if j.launcher_pid == lock_job.pid]
    assert len(jobs) == 1
    job = jobs[0]
    assert job.launcher == "torchrun"
    assert sorted(w.pid for w in job.workers) == lock_job.worker_pids()
    assert [w.rank.rank for w in job.workers] == [0, 1, 2, 3]
    assert {w.rank.world_size for w in job.workers} == {4}


def test_text_report_reads_top_down(lock_job: LaunchedJob) -> None:
    result = run_cli("stacks", "--pid", str(lock_job.pid))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "ranks 0-1,3 wait in all_reduce (torch.distributed) called from sync_gradients" in out
    assert "rank 2 is elsewhere: update_index (hang_job.py:" in out
    # Background threads of every rank are merged into one line, not repeated per rank.
    assert "heartbeat-N — ranks 0-3: heartbeat (hang_job.py:" in out
    # Folded report: far fewer lines than one dump per rank.
    assert len(out.splitlines()) < 30


def test_processes_are_not_left_stopped(lock_job: LaunchedJob) -> None:
    pids = lock_job.worker_pids()
    for _ in range(3):
        assert run_cli("stacks", "--pid", str(lock_job.pid), "--json").returncode == 0
    for pid in pids:
        state, tracer = proc_state(pid)
        assert state in ("S", "R"), f"pid {pid} left in state {state}"
        assert tracer == 0


def test_samples_mark_ranks_stuck(lock_job: LaunchedJob) -> None:
    result = run_cli("stacks", "--pid", str(lock_job.pid), "--samples", "3", "--interval", "0.2", "--json")
    assert result.returncode == 0, result.stderr
    doc = result.json()
    assert doc["samples"] == 3
    assert {p["state"] for p in doc["processes"]} == {"stuck"}


def test_out_dir_keeps_raw_dumps_privately(lock_job: LaunchedJob, tmp_path: Path) -> None:
    out = tmp_path / "dumps"
    result = run_cli("stacks", "--pid", str(lock_job.pid), "--out", str(out), "--locals")
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    raw = sorted(p.name for p in (out / "raw").iterdir())
    assert len(raw) == 4 and all(".rank-" in name and name.endswith(".json") for name in raw)
    for path in [out / "stacks.json", out / "report.txt", *(out / "raw").iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert "rank 2 is elsewhere" in (out / "report.txt").read_text()
    # --locals reaches the raw dumps: the culprit's frames carry their variables.
    assert '"locals"' in (out / "raw" / next(n for n in raw if ".rank-2." in n)).read_text()


def test_whoami_of_a_real_torchrun_worker(lock_job: LaunchedJob) -> None:
    worker = lock_job.worker_pids()[1]
    doc = run_cli("whoami", "--pid", str(worker), "--json").json()
    assert doc["world_size"] == 4 and doc["launcher"] == "torchrun"
    assert doc["rank"] == doc["local_rank"] and doc["rank"] in range(4)


#: Workers that sleep without torch: the next test is about a process that exits while it is dumped.
SLEEPING_RANK = Path(__file__).with_name("sleeping_rank.py")


def test_worker_that_exits_during_collection(tmp_path_factory: pytest.TempPathFactory) -> None:
    workdir = tmp_path_factory.mktemp("exiting")
    with torchrun_job(workdir, script=SLEEPING_RANK) as job:
        (found,) = [j for j in find_jobs(ProcessTable()) if j.launcher_pid == job.pid]
        targets = [Target(w.pid, w.rank, w.cmdline) for w in found.workers]
        # Pause the torchrun agent, or it tears the other worker down as soon as one dies.
        os.kill(job.pid, signal.SIGSTOP)
        try:
            os.kill(targets[1].pid, signal.SIGKILL)  # gone between discovery and dump
            deadline = time.monotonic() + 10  # a zombie until its (paused) parent reaps it
            while proc_state(targets[1].pid)[0] not in ("Z", "") and time.monotonic() < deadline:
                time.sleep(0.05)
            outcomes = collect(targets, find_pyspy())
        finally:
            os.kill(job.pid, signal.SIGCONT)
        assert outcomes[0].snapshot is not None
        failure = outcomes[1].failure
        assert failure is not None and failure.rank is not None and failure.rank.rank == targets[1].rank.rank
        assert "exited" in failure.reason or "zombie" in failure.reason


def test_skipped_barrier(barrier_job: LaunchedJob) -> None:
    doc = run_cli("stacks", "--pid", str(barrier_job.pid), "--json").json()
    assert doc["diagnosis"]["divergent_ranks"] == [1]
    (waiting,) = _finding(doc, "waiting")
    assert waiting["collective"].startswith("barrier")
    assert waiting["called_from"]["function"] == "wait_for_peers"
    (elsewhere,) = _finding(doc, "elsewhere")
    assert elsewhere["innermost"]["function"] == "load_batch"


def test_native_frames_still_merge_and_name_the_culprit(barrier_job: LaunchedJob) -> None:
    # --timeout 60: symbol loading takes seconds on a loaded machine; the test is not about time.
    result = run_cli(
        "stacks", "--pid", str(barrier_job.pid), "--native", "--timeout", "60", "--json", timeout=180
    )
    doc = result.json()
    assert result.returncode == 0, (result.stderr, doc["failures"])
    assert doc["native"] is True
    assert doc["diagnosis"]["divergent_ranks"] == [1]
    main_groups = [g for g in doc["groups"] if g["is_main"]]
    # Unresolved native addresses differ per process; they must not split equal stacks.
    assert len(main_groups) == 2
    assert any(f.get("library") for f in main_groups[0]["frames"])


def test_deep_call_chains(deep_job: LaunchedJob) -> None:
    doc = run_cli("stacks", "--pid", str(deep_job.pid), "--json").json()
    assert doc["diagnosis"]["divergent_ranks"] == [1]
    (waiting,) = _finding(doc, "waiting")
    assert waiting["ranks"] == "0" and waiting["called_from"]["function"] == "wait_for_peers"
    culprit = next(g for g in doc["groups"] if g["is_main"] and g["members"][0]["rank"] == 1)
    names = [f["function"] for f in culprit["frames"]]
    assert names.count("decode_record") == 5 and "read_shard" in names


def test_worker_pid_alone(deep_job: LaunchedJob) -> None:
    worker = deep_job.worker_pids()[0]
    doc = run_cli("stacks", "--pid", str(worker), "--json").json()
    assert [p["pid"] for p in doc["processes"]] == [worker]
    assert doc["diagnosis"]["findings"][0]["kind"] == "together"


@pytest.mark.slow
def test_native_text_on_a_real_gloo_job(lock_job: LaunchedJob) -> None:
    # --timeout 60: symbol loading takes seconds on a loaded machine; the test is not about time.
    argv = ["--native", "--samples", "2", "--interval", "0.2", "--no-color", "--timeout", "60"]
    result = run_cli("stacks", "--pid", str(lock_job.pid), *argv, timeout=180)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # Stuck or moving is judged on the Python samples; the native frames come after the last one.
    assert out.count("[stuck]") == 2, out
    assert "??" not in out and "0x7f" not in out
    assert "c10d::Work::wait (libtorch_cpu.so)" in out
    assert "blocked in c10d::Work::wait" in out
    # Ranks 0,1,3 share a Python stack: 0 and 1 represent them; rank 2 is alone.
    assert "native frames: ranks 0-2 dumped natively" in out


@pytest.mark.slow
def test_native_dumps_representatives_only(lock_job: LaunchedJob, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    result = run_cli(
        "stacks",
        "--pid",
        str(lock_job.pid),
        "--native",
        "--timeout",
        "60",
        "--json",
        "--out",
        str(out_dir),
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    doc = result.json()
    native = {p["rank"]["rank"]: p["native"] for p in doc["processes"]}
    assert native == {0: True, 1: True, 2: True, 3: False}
    assert sorted(p.name.split(".")[1] for p in (out_dir / "raw").glob("*.native.json")) == [
        "rank-0",
        "rank-1",
        "rank-2",
    ]
    # Rank 3 is shown with its representatives' native frames: one group for ranks 0,1,3.
    mains = [g for g in doc["groups"] if g["is_main"]]
    assert sorted(sorted(m["rank"] for m in g["members"]) for g in mains) == [[0, 1, 3], [2]]
    collective = next(g for g in mains if len(g["members"]) == 3)
    assert "c10d::Work::wait" in [f["function"] for f in collective["frames"]]
    assert any(f["function"] == "??" for f in collective["frames"])  # kept in JSON
    assert doc["diagnosis"]["divergent_ranks"] == [2]


@pytest.mark.slow
def test_native_all_dumps_every_rank(lock_job: LaunchedJob) -> None:
    result = run_cli(
        "stacks", "--pid", str(lock_job.pid), "--native-all", "--timeout", "60", "--json", timeout=180
    )
    assert result.returncode == 0, result.stderr
    doc = result.json()
    assert doc["native"] is True
    assert all(p["native"] for p in doc["processes"]) and len(doc["processes"]) == 4


def test_deadline_kills_slow_dumps_and_leaves_ranks_running(lock_job: LaunchedJob) -> None:
    # A native dump of a torch worker needs 0.4 s or more (symbol loading): 0.1 s always misses.
    # --native-all: every rank is dumped natively (--native dumps Python stacks first, which may finish).
    result = run_cli("stacks", "--pid", str(lock_job.pid), "--native-all", "--timeout", "0.1", "--json")
    assert result.returncode == 5, result.stderr
    doc = result.json()
    assert len(doc["failures"]) == 4
    assert all("did not finish within 0.1s" in f["reason"] for f in doc["failures"])
    time.sleep(0.2)
    for pid in lock_job.worker_pids():
        state, tracer = proc_state(pid)
        assert state in ("S", "R") and tracer == 0, f"pid {pid} left in state {state}"
    # ... and they still answer a normal dump.
    assert run_cli("stacks", "--pid", str(lock_job.pid), "--json").json()["diagnosis"]["divergent_ranks"] == [
        2
    ]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_sampling_at_once_with_the_samples_taken(lock_job: LaunchedJob, sig: int) -> None:
    """Ctrl-C (or SIGTERM) during `--samples 30 --interval 1`: the report of what was taken, 130/143."""
    import json
    import re
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "rankscope", "stacks", "--pid", str(lock_job.pid), "--json"]
        + ["--samples", "30", "--interval", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        time.sleep(6)  # a few samples (each takes well under a second here)
        os.kill(proc.pid, sig)
        # Without the signal this run takes 30 s; the test's own bound is 15 s.
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + sig, err
    name = signal.Signals(sig).name
    assert err.decode().strip() == f"rankscope: interrupted by {name}: the report covers what was collected"
    doc = json.loads(out)
    (note,) = [n for n in doc["diagnosis"]["notes"] if n.startswith("interrupted")]
    assert re.match(rf"interrupted by {name} after \d+ of 30 samples: this report covers", note), note
    assert 1 <= doc["samples"] < 30
    assert doc["diagnosis"]["divergent_ranks"] == [2]
    for pid in lock_job.worker_pids():
        assert proc_state(pid)[0] not in ("T", "t")  # every rank left running
