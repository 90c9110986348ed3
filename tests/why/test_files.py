"""What ranks leave behind, read by `why --from` and `--cores`: a real crash dump of the in-process
handler, a real torchelastic error file, real cores; and bad input, each one line of the report or
one error line with its exit code."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.core.conftest import Crashes, crashes  # noqa: F401 - the fixture
from tests.support.cli import run_cli

CRASH = """\
import ctypes, time

def read_record():
    ctypes.string_at(0)

def main():
    read_record()

main()
"""

RECORD = """\
from torch.distributed.elastic.multiprocessing.errors import record

def load_shard():
    raise ValueError("shard 7 is empty")

@record
def main():
    load_shard()

main()
"""


def test_a_crash_dump_of_the_in_process_handler(tmp_path: Path) -> None:
    script = tmp_path / "crasher.py"
    script.write_text(CRASH)
    runtime = tmp_path / "rt"
    env = dict(os.environ, RANKSCOPE_INPROC="1", RANKSCOPE_RUNTIME_DIR=str(runtime), RANK="1", WORLD_SIZE="2")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, timeout=60)
    assert proc.returncode < 0
    bundle = tmp_path / "capture"
    bundle.mkdir()
    for crash in runtime.glob("*.crash"):
        shutil.copy(crash, bundle / crash.name)
    result = run_cli("why", "--from", str(bundle), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    verdict = result.json()["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("fatal_signal", [1])
    assert verdict["location"] == "read_record (crasher.py:4)"
    assert "Fatal Python error: Segmentation fault" in verdict["evidence"][0]["text"]
    assert verdict["evidence"][0]["source"].startswith("crash file ")


@pytest.fixture(scope="module")
def record_error_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real error file of torch's @record, where torchrun --log-dir puts it (RUN/attempt_0/LOCAL_RANK/)."""
    pytest.importorskip("torch")
    tmp_path = tmp_path_factory.mktemp("record")
    script = tmp_path / "train.py"
    script.write_text(RECORD)
    target = tmp_path / "logs" / "job-7" / "attempt_0" / "1" / "error.json"
    target.parent.mkdir(parents=True)
    env = dict(os.environ, TORCHELASTIC_ERROR_FILE=str(target), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, timeout=120)
    assert proc.returncode != 0 and target.exists(), proc.stderr
    return target


def test_a_torchelastic_error_file_written_by_record(record_error_file: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "capture"
    bundle.mkdir()
    shutil.copy(record_error_file, bundle / "error.json")
    result = run_cli("why", "--from", str(bundle), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    verdict = result.json()["verdict"]
    assert verdict["cause"] == "python_exception"
    assert verdict["location"] == "load_shard (train.py:4)"
    assert "shard 7 is empty" in verdict["evidence"][0]["text"]


WAITING = """\
import os, sys, time

def save_checkpoint():
    open(sys.argv[1], "w").close()
    time.sleep(600)

def wait_for_peers():
    open(sys.argv[1], "w").close()
    time.sleep(600)

save_checkpoint() if os.environ["RANK"] == "1" else wait_for_peers()
"""


def test_trace_rings_are_found_without_asking(tmp_path: Path) -> None:
    """Two ranks under `rankscope trace run --out DIR`: rank 1 is SIGKILLed in save_checkpoint, rank 0
    waits. Named only by rank 0's pid, why finds the ring rank 0 holds open, and beside it rank 1's
    (written since the job started), not a ring an earlier job left there."""
    script = tmp_path / "train.py"
    script.write_text(WAITING)
    traces = tmp_path / "traces"
    ranks = []
    try:
        for rank in (0, 1):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
            argv = [sys.executable, "-m", "rankscope", "trace", "run", "--out", str(traces), "--"]
            ranks.append(
                subprocess.Popen(
                    [*argv, str(script), str(tmp_path / f"ready.{rank}")], env=env, start_new_session=True
                )
            )
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready.{rank}").exists() for rank in (0, 1)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in ranks), (
                "the ranks did not start"
            )
            time.sleep(0.1)
        ranks[1].kill()
        ranks[1].wait()
        (ring,) = traces.glob("trace-*-1-*")
        earlier = traces / "trace-elsewhere-1-4242"  # an earlier job's ring of rank 1: not this job's
        shutil.copyfile(ring, earlier)
        os.utime(earlier, (time.time() - 3600, time.time() - 3600))
        result = run_cli("why", "--pid", str(ranks[0].pid), "--json")
        assert result.returncode == 15, result.stderr + result.stdout
        document = result.json()
        signals = {s["name"]: (s["state"], s["detail"]) for s in document["signals"]}
        assert signals["trace rings"] == ("read", f"found without asking in {traces}: 2 rings, 2 ranks")
        verdict = document["verdict"]
        assert verdict["ranks"] == [1] and "save_checkpoint" in verdict["location"]  # the ring's place
        assert any(
            e["source"] == "trace rings"
            and e["text"].startswith("rank 1 was last at ")
            and "save_checkpoint" in e["text"]
            for e in verdict["evidence"]
        ), verdict
    finally:
        for proc in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:  # a job with no ring: one line that says so
        result = run_cli("why", "--pid", str(plain.pid), "--json")
        signals = {s["name"]: s["state"] for s in result.json()["signals"]}
        assert signals["trace rings"] == "absent"
    finally:
        os.killpg(plain.pid, signal.SIGKILL)
        plain.wait()


@pytest.mark.needs("gdb")  # the fixture's cores are those `core bt` reads
def test_cores_name_the_rank_that_crashed(crashes: Crashes, tmp_path: Path) -> None:  # noqa: F811
    core = crashes.crash(rank=3)
    cores = tmp_path / "cores"
    cores.mkdir()
    shutil.copy(core, cores / core.name)
    result = run_cli("why", "--cores", str(cores), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    verdict = result.json()["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("native_crash", [3])
    assert "SIGSEGV" in verdict["evidence"][0]["text"]
    assert verdict["next_step"].startswith("rankscope core bt ")


def test_bad_inputs_are_lines_of_the_report_or_one_error_line(tmp_path: Path) -> None:
    missing = run_cli("why", "--from", str(tmp_path / "nope"))
    assert missing.returncode == 8 and missing.stderr.count("\n") == 1
    assert "not a directory" in missing.stderr
    empty = run_cli("why", "--from", str(tmp_path))
    assert empty.returncode == 8 and "no signal kept there" in empty.stderr
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "n.rank-0.pid-5.crash").write_bytes(b"\x00\xff garbage, not faulthandler")
    (hostile / "error.json").write_text("{not json")
    (hostile / "job.log").write_text("[rank0]: ValueError: bad value\n")
    os.mkfifo(hostile / "n.rank-1.pid-6.term")
    result = run_cli("why", "--from", str(hostile), "--json", timeout=30)
    assert result.returncode == 15, result.stderr
    document = result.json()
    assert document["verdict"]["ranks"] == [0]
    signals = {s["name"]: s["state"] for s in document["signals"]}
    assert signals["torchelastic error files"] == "absent"
    log = run_cli("why", "--log", str(tmp_path / "missing.log"), "--json")
    assert log.returncode == 4, log.stderr  # the evidence named could not be read: too partial to judge
    assert any(s["name"] == "job output" and s["state"] == "failed" for s in log.json()["signals"])


@pytest.mark.needs("pidns")
def test_no_job_and_no_input_is_nothing_to_judge() -> None:
    """In a pid namespace of its own (no job of another test is visible): exit 3, the signals listed."""
    proc = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "rankscope", "why"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr + proc.stdout
    assert "Nothing to judge: no job on this node and no input named or readable" in proc.stdout
    assert "stacks" in proc.stdout and "no distributed job found on this node" in proc.stdout


TERM = """\
import faulthandler, os, sys

def wait_for_peers():
    with open(sys.argv[1], "w") as out:
        faulthandler.dump_traceback(out, all_threads=True)

wait_for_peers()
"""


def test_a_sigterm_dump_beside_a_crash_dump(tmp_path: Path) -> None:
    """faulthandler's text of a rank ended by SIGTERM (``<base>.term``, what the in-process handler
    writes) is that rank's state; the other rank's crash is the verdict."""
    bundle = tmp_path / "capture"
    runtime = bundle / "runtime"
    runtime.mkdir(parents=True)
    script = tmp_path / "peer.py"
    script.write_text(TERM)
    subprocess.run(
        [sys.executable, str(script), str(runtime / "n1.rank-0.pid-41.term")], check=True, timeout=60
    )
    crasher = tmp_path / "crasher.py"
    crasher.write_text(CRASH)
    env = dict(
        os.environ, RANKSCOPE_INPROC="1", RANKSCOPE_RUNTIME_DIR=str(tmp_path / "rt"), RANK="1", WORLD_SIZE="2"
    )
    subprocess.run([sys.executable, str(crasher)], env=env, capture_output=True, timeout=60)
    for crash in (tmp_path / "rt").glob("*.crash"):
        shutil.copy(crash, runtime / crash.name)
    result = run_cli("why", "--from", str(bundle), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    document = result.json()
    assert (document["verdict"]["cause"], document["verdict"]["ranks"]) == ("fatal_signal", [1])
    states = {s["ranks"]: s["state"] for s in document["ranks"]}
    assert states["0"] == "ended by SIGTERM in wait_for_peers (peer.py:5)"
    assert states["1"] == "died of a fatal signal in read_record (crasher.py:4)"


def test_the_jobs_output_is_read_from_files_never_from_a_pipe_or_a_terminal(tmp_path: Path) -> None:
    from rankscope.why.output import output_files, torchrun_log_dir

    log = tmp_path / "err.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(["sleep", "30"], stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    try:
        assert output_files([proc.pid]) == [str(log)]
    finally:
        proc.kill()
        proc.wait()
    assert torchrun_log_dir(["torchrun", "--log-dir", "logs", "train.py"], "/job") == "/job/logs"
    assert torchrun_log_dir(["torchrun", "--log_dir=/abs", "train.py"], "/job") == "/abs"
    assert torchrun_log_dir(["torchrun", "train.py"], "/job") is None


SCONTROL = """\
JobId=2180718 JobName=train.sbatch
   UserId=ana(1000) GroupId=ana(1000) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=gpu[001-002]
   WorkDir=/home/ana/run
   StdErr=/home/ana/run/slurm-2180718.err
   StdIn=/dev/null
   StdOut=/home/ana/run/slurm-2180718.out
"""


def test_slurm_output_files_from_scontrol() -> None:
    from rankscope.why.output import slurm_output_paths

    assert slurm_output_paths(SCONTROL) == [
        "/home/ana/run/slurm-2180718.err",
        "/home/ana/run/slurm-2180718.out",
    ]


KILLED = """\
import os, signal

def save_checkpoint():
    os.kill(os.getpid(), signal.SIGKILL)

def main():
    save_checkpoint()

main()
"""


def test_a_killed_rank_is_placed_by_its_trace_ring(tmp_path: Path) -> None:
    """A rank SIGKILLed leaves no stack and no crash dump; its trace ring (rankscope trace run) tells
    where it was, and the job's output says who killed it."""
    script = tmp_path / "train.py"
    script.write_text(KILLED)
    traces = tmp_path / "traces"
    env = dict(os.environ, RANK="1", WORLD_SIZE="2", LOCAL_RANK="1")
    proc = subprocess.run(
        [sys.executable, "-m", "rankscope", "trace", "run", "--out", str(traces), "--", str(script)],
        env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0
    log = tmp_path / "job.log"
    log.write_text(
        "[2026-11-26 00:40:00,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
        "(exitcode: -9) local_rank: 1 (pid: 4243) of binary: /usr/bin/python3\n"
    )
    result = run_cli("why", "--trace", str(traces), "--log", str(log), "--json")
    assert result.returncode == 15, result.stderr + result.stdout
    document = result.json()
    signals = {s["name"]: (s["state"], s["detail"]) for s in document["signals"]}
    assert signals["trace rings"][0] == "read"
    states = {s["ranks"]: s["state"] for s in document["ranks"]}
    assert states["1"].startswith("last seen by its trace ring at ") and "save_checkpoint" in states["1"]
    verdict = document["verdict"]
    assert (verdict["cause"], verdict["ranks"]) == ("sigkill", [1])  # torchrun's line
    assert "save_checkpoint" in verdict["location"]  # the ring's
    assert any(e["source"] == "trace rings" for e in verdict["evidence"])


@pytest.mark.needs("gdb")  # the fixture's cores are those `core bt` reads
def test_a_core_written_since_the_job_started_is_found_without_asking(
    crashes: Crashes,  # noqa: F811
) -> None:
    """kernel.core_pattern points at the fixture's directory; the job (one process here, started
    first) is looked at with --pid, and the core of its rank that crashed since is found there."""
    job = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], cwd=crashes.directory, start_new_session=True
    )
    try:
        time.sleep(0.05)
        crashes.crash(rank=1)
        result = run_cli("why", "--pid", str(job.pid), "--json")
        assert result.returncode == 15, result.stderr + result.stdout
        document = result.json()
        assert (document["verdict"]["cause"], document["verdict"]["ranks"]) == ("native_crash", [1])
        cores = next(s for s in document["signals"] if s["name"] == "cores")
        assert cores["state"] == "read" and cores["detail"].startswith("1 written since the job started")
    finally:
        job.kill()
        job.wait()


def test_error_files_under_torchruns_log_dir_name_the_global_rank(record_error_file: Path) -> None:
    """The global rank from the local rank and the node's place that its live ranks give (node 1 of
    2-rank nodes)."""
    from rankscope.model import RankId
    from rankscope.stacks.report import ProcessInfo, StacksReport
    from rankscope.why.files import log_dir_errors

    logs = record_error_file.parents[3]
    live = StacksReport(processes=[ProcessInfo(11, RankId("n2", 2, 0, 4, 1, 2))])
    (item,) = log_dir_errors([str(logs)], 0.0, live)
    assert (item.rank, item.location) == (3, "load_shard (train.py:4)")
    assert "ValueError: shard 7 is empty" in item.what
    assert log_dir_errors([str(logs)], record_error_file.stat().st_mtime + 10, live) == []  # an earlier job's


def test_a_dump_older_than_the_process_that_now_has_its_pid_is_not_that_rank_s(tmp_path: Path) -> None:
    """pids come round again (pid_max 32768 on a busy node): a ``.term`` dump that a dead rank left in
    the shared runtime directory is not the dump of a later process given the same pid."""
    from rankscope.ranks import short_hostname
    from rankscope.why.files import runtime_files

    host = short_hostname()
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dump = tmp_path / f"{host}.rank-0.pid-{worker.pid}.term"
        dump.write_text(
            'Current thread 0x00007f (most recent call first):\n  File "t.py", line 3 in evaluate\n'
        )
        os.chmod(dump, 0o600)
        before = time.time() - 3600  # written by the pid's earlier owner, an hour ago
        os.utime(dump, (before, before))
        files, _ = runtime_files([(str(tmp_path), os.getuid())], {worker.pid}, 0.0, host)
        assert files == []
        os.utime(dump, None)  # written now: this process's own
        files, _ = runtime_files([(str(tmp_path), os.getuid())], {worker.pid}, 0.0, host)
        assert [f.pid for f in files] == [worker.pid]
    finally:
        worker.kill()
        worker.wait()


def test_a_dump_of_a_rank_the_job_does_not_have_is_another_jobs(tmp_path: Path) -> None:
    """The runtime directory is shared by every job of the user: a dump written since the job started
    by a pid that is not the job's is of a rank of the job that ended only when the job has that rank
    (below its world size) and none of its live ranks is it; the others are left out with a note (pids
    above pid_max here: never a live process)."""
    from rankscope.ranks import short_hostname
    from rankscope.why.files import runtime_files

    host = short_hostname()
    for name in ("rank-9.pid-4000001", "rank-1.pid-4000002", "rank-0.pid-4000003"):
        dump = tmp_path / f"{host}.{name}.crash"
        dump.write_text('Current thread 0x00007f (most recent call first):\n  File "t.py", line 3 in step\n')
        dump.chmod(0o600)
    notes: list[str] = []
    live = {0: 4000010}  # the job: rank 0 lives, rank 1 of its 2 ended
    files, ranks = runtime_files([(str(tmp_path), os.getuid())], {4000010}, 0.0, host, live, 2, notes)
    assert ([f.pid for f in files], ranks) == ([4000002], {4000002: 1})
    assert notes == [
        f"crash dump {tmp_path}/{host}.rank-0.pid-4000003.crash (pid 4000003): the job's rank 0 is pid "
        "4000010, left out",
        f"crash dump {tmp_path}/{host}.rank-9.pid-4000001.crash (pid 4000001): rank 9 is not one of the "
        "job's 2 ranks, left out",
    ]


@pytest.mark.needs("gdb")  # the fixture's cores are those `core bt` reads
def test_a_core_of_another_program_is_not_the_jobs(crashes: Crashes, tmp_path: Path) -> None:  # noqa: F811
    """`why --pid` looks for cores written since the job started where this node puts them: a core of
    a process that is neither one of the job's nor a rank (another program, crashing at the same time)
    is left out with a note, and so is a rank's core of another job (another master port: another
    test's job crashing at the same time, or none: a rank of no torchrun job; or the same rendezvous
    but a rank the job does not have, or one of its live ranks); a rank's core in the same place is
    still the verdict."""
    job = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={
            **os.environ,
            "RANK": "0",
            "WORLD_SIZE": "4",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29411",
        },
        start_new_session=True,
    )
    try:
        time.sleep(1.1)  # the cores below are written after the job started
        other = crashes.crash()
        elsewhere = crashes.crash(rank=2, env_extra={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29412"})
        bare = crashes.crash(rank=4)  # a rank of no torchrun job: no rendezvous at all
        same = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29411"}
        beyond, twin = crashes.crash(rank=5, env_extra=same), crashes.crash(rank=0, env_extra=same)
        result = run_cli("why", "--pid", str(job.pid), "--json")
        document = result.json()
        assert (document["verdict"] or {}).get("cause") != "native_crash", document["verdict"]
        notes = document["notes"]
        assert any(str(beyond) in note and "rank 5 is not one of the job's 4 ranks" in note for note in notes)
        assert any(str(twin) in note and f"the job's rank 0 is pid {job.pid}" in note for note in notes)
        assert any(str(bare) in note and "MASTER_ADDR is not the job's" in note for note in document["notes"])
        assert any(str(other) in note and "not a process of this job" in note for note in document["notes"])
        assert any(
            str(elsewhere) in note and "MASTER_PORT is not the job's" in note for note in document["notes"]
        )
        crashes.crash(rank=3, env_extra={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29411"})
        again = run_cli("why", "--pid", str(job.pid), "--json").json()
        assert (again["verdict"]["cause"], again["verdict"]["ranks"]) == ("native_crash", [3])
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


PIPED = """\
import threading, time


def load_batch():
    raise RuntimeError("bad batch on rank 1")


threading.Thread(target=time.sleep, args=(600,)).start()  # keeps the rank alive after main raised
load_batch()
"""


def test_the_output_through_a_pipe_is_read_from_the_file_tee_writes(tmp_path: Path) -> None:
    """``python train.py 2>&1 | tee train.log``: the rank's stdout is a pipe (never read); tee, which
    reads it, writes train.log, where the traceback is found without asking."""
    script = tmp_path / "train.py"
    script.write_text(PIPED)
    log = tmp_path / "train.log"
    env = dict(os.environ, RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", PYTHONUNBUFFERED="1")
    argv = [sys.executable, str(script)]
    rank = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    assert rank.stdout is not None
    tee = subprocess.Popen(
        ["tee", str(log)], stdin=rank.stdout, stdout=subprocess.DEVNULL, start_new_session=True
    )
    rank.stdout.close()
    try:
        deadline = time.monotonic() + 60
        while b"RuntimeError: bad batch" not in (log.read_bytes() if log.exists() else b""):
            assert time.monotonic() < deadline and rank.poll() is None, "no traceback through the pipe"
            time.sleep(0.1)
        result = run_cli("why", "--pid", str(rank.pid), "--json")
        assert result.returncode == 15, result.stderr + result.stdout
        document = result.json()
        verdict = document["verdict"]
        # (no torch here: torch's excepthook would prefix the lines with [rank1]: and name the rank)
        assert verdict["cause"] == "python_exception" and "bad batch on rank 1" in verdict["text"]
        assert verdict["location"] == "load_batch (train.py:5)"
        assert verdict["evidence"][0]["source"].startswith(f"{log}:")
        assert document["logs"] == [str(log)]
    finally:
        for proc in (rank, tee):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
