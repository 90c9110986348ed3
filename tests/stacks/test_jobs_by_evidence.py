"""Jobs by evidence: a real hung 4-rank torchrun job beside rank-carrying Python processes of no job.

Other tests run their own jobs on this machine at the same time, so each test here checks only its own
job and its own processes in what discovery finds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest
from tests.support.users import LocalUser

from rankscope.demo.launch import LaunchedJob
from rankscope.jobkey import JobKey
from rankscope.procs import NO_LAUNCHER, ProcessTable, discover
from rankscope.stacks.merge import merge_reports
from rankscope.stacks.render import render_text, stray_text
from rankscope.stacks.report import Diagnosis, JobInfo, StacksReport, StrayInfo

pytestmark = pytest.mark.slow

SLEEP = "import time; time.sleep(300)"
USER_PYTHON = "/usr/bin/python3"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TORCHELASTIC_", "SLURM_", "OMPI_", "PMI", "MASTER_", "RANK", "WORLD_SIZE"))
    }
    env.update(extra)
    return env


def _wait_for_env(pid: int, name: str) -> None:
    """Until the process has exec'd its Python (its environment then carries ``name``); a loaded
    machine may take many seconds to start one."""
    for _ in range(1200):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
            # argv[0]: unshare's forked child carries the environment and python's path among its
            # arguments before it execs python itself
            if f"{name}=".encode() in environ and b"python" in program.rsplit(b"/", 1)[-1]:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"process {pid} never started its Python")


class Started:
    """Processes started in their own process groups, each killed by its group at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], env: dict[str, str], user: Optional[LocalUser] = None) -> int:
        kwargs = user.popen_kwargs(env) if user is not None else {"env": env}
        proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc.pid

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture
def started() -> Iterator[Started]:
    procs = Started()
    try:
        yield procs
    finally:
        procs.stop()


@pytest.fixture
def strays(started: Started, local_users: tuple[LocalUser, LocalUser]) -> dict[str, int]:
    """Two Python processes with ``RANK=0 WORLD_SIZE=1`` under no launcher: root's, and another user's."""
    other = local_users[1]
    env = _clean_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    mine = started.start([sys.executable, "-c", SLEEP], env)
    twin = started.start([sys.executable, "-c", SLEEP], env)  # the same user's, the same variables
    theirs = started.start([USER_PYTHON, "-c", SLEEP], env, user=other)
    for pid in (mine, twin, theirs):
        _wait_for_env(pid, "WORLD_SIZE")
    return {"mine": mine, "twin": twin, "theirs": theirs, "other_uid": other.uid}


def test_discovery_keeps_strays_out_of_the_job(lock_job: LaunchedJob, strays: dict[str, int]) -> None:
    found = discover(ProcessTable())
    (job,) = [j for j in found.jobs if j.launcher_pid == lock_job.pid]
    assert sorted(w.pid for w in job.workers) == lock_job.worker_pids()
    assert job.key.world_size == 4 and job.key.run_id and job.key.master
    stray_pids = {w.pid for w in found.strays}
    # Two scripts of one user that each say RANK=0 WORLD_SIZE=1 are two strays, not a 2-rank job.
    assert {strays["mine"], strays["twin"], strays["theirs"]} <= stray_pids
    in_jobs = {w.pid for j in found.jobs for w in j.workers}
    assert not in_jobs & {strays["mine"], strays["twin"], strays["theirs"]}
    (theirs,) = [w for w in found.strays if w.pid == strays["theirs"]]
    assert theirs.uid == strays["other_uid"] and theirs.rank.rank == 0 and theirs.rank.world_size == 1


def _stray_line(stray_pid: int) -> str:
    """The line the report prints for a stray, from this node's discovery (no dump: `stacks` with no
    target would take every other test's processes too; the whole command runs in its own PID
    namespace in test_alone_on_a_node_the_job_is_4_of_4_and_the_stray_is_apart)."""
    (w,) = [w for w in discover(ProcessTable()).strays if w.pid == stray_pid]
    info = StrayInfo("here", w.pid, w.rank.rank, w.rank.world_size, w.uid, w.cmdline, ns_pid=w.ns_pid)
    return stray_text(info)


def test_the_report_names_each_stray_with_its_owner(lock_job: LaunchedJob, strays: dict[str, int]) -> None:
    assert f"pid {strays['mine']} (uid 0): rank 0, world size 1, no launcher" in _stray_line(strays["mine"])
    theirs = _stray_line(strays["theirs"])
    assert f"pid {strays['theirs']} (uid {strays['other_uid']}): rank 0, world size 1, no launcher" in theirs


def test_ranks_without_a_launcher_that_share_a_rendezvous_are_one_job(started: Started) -> None:
    """Two ranks started by hand (no launcher) with one MASTER_ADDR:MASTER_PORT: a job; a third with
    another port is another job, never merged into the first."""
    pids = []
    for rank, port in ((0, "29911"), (1, "29911"), (0, "29912")):
        env = _clean_env(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        pids.append(started.start([sys.executable, "-c", SLEEP], env))
    for pid in pids:
        _wait_for_env(pid, "MASTER_PORT")
    found = discover(ProcessTable())
    by_pid = {w.pid: j for j in found.jobs for w in j.workers}
    assert by_pid[pids[0]] is by_pid[pids[1]]
    pair = by_pid[pids[0]]
    assert pair.launcher == NO_LAUNCHER and sorted(w.pid for w in pair.workers) == sorted(pids[:2])
    assert pair.key == JobKey(master="127.0.0.1:29911", world_size=2)
    assert by_pid[pids[2]] is not pair and [w.pid for w in by_pid[pids[2]].workers] == [pids[2]]


def test_a_script_started_by_hand_with_the_job_s_variables_and_a_taken_rank_is_a_stray(
    started: Started, tmp_path: Path
) -> None:
    """Ranks 0 and 1 of train.py with no launcher, and in the same shell another script that got the
    job's variables with RANK=0: two rank 0s of one rendezvous. The job runs one program; the other
    script's process is a stray (it was once taken into the job and then blamed as its rank 0)."""
    script = tmp_path / "train.py"
    script.write_text(SLEEP + "\n")
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29913"}
    ranks = [started.start([sys.executable, str(script)], _clean_env(RANK=str(r), **env)) for r in (0, 1)]
    stray = started.start([sys.executable, "-c", SLEEP], _clean_env(RANK="0", **env))
    for pid in (*ranks, stray):
        _wait_for_env(pid, "MASTER_PORT")
    found = discover(ProcessTable())
    (job,) = [j for j in found.jobs if {w.pid for w in j.workers} & set(ranks)]
    assert sorted(w.pid for w in job.workers) == sorted(ranks)
    assert stray in {w.pid for w in found.strays}


@pytest.mark.needs("pidns")
def test_a_process_in_its_own_pid_namespace_is_named_by_its_host_pid(started: Started) -> None:
    env = _clean_env(RANK="0", WORLD_SIZE="1")
    outer = started.start(
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", sys.executable, "-c", SLEEP], env
    )
    inner = None
    for _ in range(200):
        children = ProcessTable().children.get(outer, [])
        if children:
            inner = children[0]
            try:
                _wait_for_env(inner, "WORLD_SIZE")
                break
            except RuntimeError:
                pass
        time.sleep(0.05)
    assert inner is not None
    found = discover(ProcessTable())
    (stray,) = [w for w in found.strays if w.pid == inner]
    assert stray.ns_pid == 1  # the first process of its namespace; rankscope names it by the host's pid
    assert f"pid {inner} (uid 0, 1 in its container): rank 0, world size 1, no launcher" in _stray_line(inner)


def _node(host: str, key: str) -> StacksReport:
    return StacksReport(hosts=[host], jobs=[JobInfo(host, "torchrun", 100, pids=[101], key=key)])


def test_a_merge_of_two_jobs_is_flagged_at_the_head() -> None:
    same = merge_reports(
        [_node("n1", "run_id=a master=n1:29500 world=8"), _node("n2", "run_id=a master=n1:29500 world=8")]
    )
    assert same.mixed_jobs is None
    # A key that leaves a part out (an older node's answer) agrees with one that has it.
    assert merge_reports([_node("n1", "world=8"), _node("n2", "run_id=a world=8")]).mixed_jobs is None
    mixed = merge_reports([_node("n1", "run_id=a world=8"), _node("n2", "run_id=b world=8")])
    assert mixed.mixed_jobs == {"n1": ["run_id=a world=8"], "n2": ["run_id=b world=8"]}
    head = render_text(mixed, Diagnosis("")).splitlines()[1]
    assert head.startswith("warning: the nodes answered for different jobs (run_id=a world=8 on n1; ")
    assert "name the job on each node with --pid, or narrow --hosts" in head


#: In a pid namespace of its own (no other test's job in sight): a stray, then `rankscope stacks`.
ONLY_A_STRAY = """
RANK=0 WORLD_SIZE=1 "$1" -c 'import time; time.sleep(300)' &
for _ in $(seq 100); do grep -qs WORLD_SIZE /proc/$!/environ && grep -qs python /proc/$!/cmdline && break; sleep 0.05; done
"$1" -m rankscope stacks --no-fr
echo "rc=$?"
kill $!
"""


@pytest.mark.needs("pidns")
def test_no_job_but_a_stray_says_what_it_left_out() -> None:
    proc = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "sh",
            "-c",
            ONLY_A_STRAY,
            "sh",
            sys.executable,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_env(),
        start_new_session=True,
    )
    assert "rc=3" in proc.stdout, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("rankscope: error: no distributed job found on this node"), proc.stderr
    assert (
        lines[1].startswith("  not part of any job: pid ")
        and ": rank 0, world size 1, no launcher — " in lines[1]
    )


#: Run in a pid namespace of its own: a hung 4-rank torchrun job, a stray, then `rankscope stacks`.
JOB_AND_STRAY = """
import os, signal, subprocess, sys, tempfile
from pathlib import Path
from rankscope.demo.launch import start_torchrun
job = start_torchrun(nproc=4, script_args=("--scenario", "lock", "--culprit", "2"), workdir=Path(tempfile.mkdtemp()))
stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                         env={**os.environ, "RANK": "0", "WORLD_SIZE": "1"}, start_new_session=True)
try:
    job.wait_ready(timeout=180)
    print(f"job={job.pid} stray={stray.pid}", flush=True)
    sys.stdout.flush()
    subprocess.run([sys.executable, "-m", "rankscope", "stacks", "--no-fr"], check=False)
finally:
    os.killpg(stray.pid, signal.SIGKILL)
    job.stop()
"""


@pytest.mark.needs("pidns")
def test_alone_on_a_node_the_job_is_4_of_4_and_the_stray_is_apart(tmp_path: Path) -> None:
    """The issue's node, with no other test's job in sight: the header is the job's alone."""
    pytest.importorskip("torch.distributed")
    argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", sys.executable, "-c", JOB_AND_STRAY]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(),
        cwd=tmp_path,
        start_new_session=True,
    )
    out = proc.stdout
    first, _, report = out.partition("\n")
    job, stray = (int(part.split("=")[1]) for part in first.split())
    head = report.splitlines()[0]
    assert (
        head.startswith(f"rankscope stacks: torchrun pid {job} on ") and " — 4 of 4 processes dumped" in head
    ), out
    assert "rank 2 is elsewhere: update_index" in report
    assert "rank 0 is elsewhere" not in report
    assert (
        f"Not part of any job (1, not dumped)\n  pid {stray} (uid 0): rank 0, world size 1, no launcher"
        in report
    )
