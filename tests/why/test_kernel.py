"""Kernel messages (pure): OOM-killer kills, segfaults and NVIDIA Xids, parsed and weighed.

No GPU can be used here, and a machine-wide OOM kill would harm the machine: the lines below were
written for this test in the kernel's formats (mm/oom_kill.c, arch/x86/mm/fault.c) and NVIDIA's documented Xid
form (``NVRM: Xid (PCI:BUS): N, pid=PID, name=COMM, text``), as dmesg --time-format iso and
journalctl -k -o short-iso print them. A segfault is real: the last test crashes a process and
reads the kernel's own line; so is an OOM kill inside a memory cgroup (tests/why/test_oom_kill.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.machine_lock import machine_lock
from tests.support.users import LocalUser, job_user, local_users  # noqa: F401 - fixtures

from rankscope.why.collect import event_time
from rankscope.why.kernel import parse_kernel
from rankscope.why.signals import Gathered
from rankscope.why.weigh import weigh

DMESG = """\
2026-11-26T00:10:01,100000+00:00 eth0: link up
2026-11-26T00:12:03,123456+00:00 python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
2026-11-26T00:12:03,123500+00:00 oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=python,pid=4243,uid=1000
2026-11-26T00:12:03,123600+00:00 Out of memory: Killed process 4243 (python) total-vm:81234567kB, anon-rss:61234567kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:123456kB oom_score_adj:0
2026-11-26T00:13:00,000000+00:00 python[4250]: segfault at 0 ip 00007f3a1b2c3d4e sp 00007ffd5e6f7a80 error 4 in libfoo.so[7f3a1b200000+1c000]
2026-11-26T00:14:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=4251, name=python, GPU has fallen off the bus.
2026-11-26T00:14:01,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.
"""

JOURNAL = """\
2026-11-26T00:20:00+0000 node7 kernel: Memory cgroup out of memory: Killed process 5001 (pt_main_thread) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0
2026-11-26T00:20:05+0000 node7 kernel: traps: python3[5002] general protection fault ip:7f00 sp:7ffc error:0 in libc.so.6[7f00+1000]
[ 1234.567890] NVRM: Xid (PCI:0000:07:00): 94, pid=5003, name=python, Contained: SM (0x1). RST: No, D-RST: No
"""


def test_dmesg_lines_give_each_event_once_with_its_pid_and_time() -> None:
    events = parse_kernel(DMESG.splitlines())
    assert [(e.kind, e.pid, e.xid) for e in events] == [
        ("oom_kill", 4243, None),  # the summary and the "Killed process" line of one kill: once
        ("segfault", 4250, None),
        ("xid", 4251, 79),
        ("xid", None, 48),
    ]
    assert events[0].time == "2026-11-26T00:12:03,123500+00:00"
    assert event_time(events[0].time) == event_time("2026-11-26T00:12:03.1235+00:00")


def test_journal_lines_and_times_after_boot() -> None:
    events = parse_kernel(JOURNAL.splitlines())
    assert [(e.kind, e.pid, e.xid) for e in events] == [
        ("oom_kill", 5001, None),
        ("segfault", 5002, None),
        ("xid", 5003, 94),
    ]
    assert event_time(events[0].time) is not None
    assert events[2].time == "1234.567890 s after boot"
    assert event_time(events[2].time) is None


def test_an_oom_kill_of_a_rank_is_the_verdict_and_other_processes_are_not_blamed() -> None:
    gathered = Gathered(hosts=["node7"], kernel=parse_kernel(DMESG.splitlines()), pid_rank={4243: 3, 4300: 0})
    report = weigh(gathered)
    assert report.verdict is not None
    assert (report.verdict.cause, report.verdict.ranks) == ("oom_kill", [3])
    assert report.verdict.evidence[0].source.startswith("kernel messages, line ")
    assert "Killed process 4243" in report.verdict.evidence[0].text
    # the segfault and Xid 79 are of pids that are not the job's: not hypotheses about it
    assert all(h.cause not in ("segfault",) for h in report.hypotheses)


def test_an_xid_without_a_pid_is_a_hypothesis_about_the_node_and_ecc_is_named() -> None:
    gathered = Gathered(hosts=["node7"], kernel=parse_kernel(DMESG.splitlines()[-1:]), pid_rank={4300: 0})
    report = weigh(gathered)
    assert report.verdict is not None
    assert report.verdict.cause == "gpu_ecc"
    assert "Xid 48: double-bit ECC error" in report.verdict.evidence[0].text


def test_xid_43_recorded_on_an_h100_is_the_programs_fault_and_says_so() -> None:
    """The driver's own lines after a device-side assert of rank 1 (pid 780), recorded on an H100
    (tests/data/gpu-h100/xid43_dmesg.txt): the next step is the program's CUDA error, not the GPU."""
    lines = (Path(__file__).parents[1] / "data/gpu-h100/xid43_dmesg.txt").read_text().splitlines()
    report = weigh(Gathered(hosts=["vm"], kernel=parse_kernel(lines), pid_rank={780: 1, 779: 0}))
    xid = next(f for f in report.findings if f.cause == "gpu_xid")
    assert (
        xid.role == "victim" and "Xid 43: GPU stopped processing" in xid.what
    )  # the program's CUDA error is the cause
    assert "the program's own fault" in xid.next_step and "rerun --sync" in xid.next_step
    assert "GPU reset" not in xid.next_step
    ecc = weigh(Gathered(hosts=["node7"], kernel=parse_kernel(DMESG.splitlines()[-1:]), pid_rank={4300: 0}))
    assert ecc.verdict is not None and "nvidia-smi -q" in ecc.verdict.next_step


def test_the_kernel_signal_tells_the_jobs_xid_from_another_processs() -> None:
    """`why --log` after an earlier job on the node: its Xid 43 (pid 780) is not said to be the job's."""
    from rankscope.why.collect import kernel_signal

    text = (Path(__file__).parents[1] / "data/gpu-h100/xid43_dmesg.txt").read_text()
    for pid_rank, detail in (
        ({}, "dmesg: 3 lines; NVIDIA Xid 43 of no process of the job"),
        ({780: 1}, "dmesg: 3 lines; about the job: xid"),
    ):
        gathered = Gathered(pid_rank=pid_rank)
        kernel_signal(text, "dmesg", "", gathered)
        assert gathered.signals[-1].detail == detail


def test_a_segfault_of_a_rank_is_a_crash_of_that_rank() -> None:
    gathered = Gathered(kernel=parse_kernel(JOURNAL.splitlines()), pid_rank={5002: 1})
    report = weigh(gathered)
    assert report.verdict is not None
    assert (report.verdict.cause, report.verdict.ranks) == ("segfault", [1])


def test_kernel_messages_not_permitted_are_a_line_that_says_why() -> None:
    """What dmesg and journalctl print to a user without CAP_SYSLOG under kernel.dmesg_restrict=1."""
    from rankscope.why.collect import kernel_signal

    gathered = Gathered()
    kernel_signal(
        None,
        "",
        "dmesg: dmesg: read kernel buffer failed: Operation not permitted; journalctl: No journal files were found.",
        gathered,
    )
    (line,) = gathered.signals
    assert (line.name, line.state) == ("kernel messages", "refused")
    assert "needs root or CAP_SYSLOG" in line.detail and "Operation not permitted" in line.detail
    gathered = Gathered()
    kernel_signal(None, "", "dmesg not found; journalctl not found", gathered)
    assert gathered.signals[0].state == "absent"


RESTRICT = Path("/proc/sys/kernel/dmesg_restrict")


def test_a_user_refused_by_dmesg_is_answered_by_journalctl_or_told_why(
    job_user: LocalUser,  # noqa: F811 - the imported fixture
) -> None:
    """For real: `why` run by an unprivileged user under kernel.dmesg_restrict=1 (set for the test
    when it is not, under the sysctl lock): dmesg is refused, journalctl -k is asked next (this
    machine keeps no journal: it has nothing to say), and the kernel line says both and why."""
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as log:
        log.write("step 1 loss 2.0\n")
    os.chmod(log.name, 0o644)  # the user reads it
    try:
        with machine_lock("sysctl"):
            before = RESTRICT.read_text().strip()
            try:
                if before != "1":
                    RESTRICT.write_text("1\n")
            except OSError as err:
                pytest.skip(f"kernel.dmesg_restrict cannot be set here: {err}")
            try:
                proc = subprocess.run(
                    job_user.argv(sys.executable, "-m", "rankscope", "why", "--log", log.name, "--json"),
                    capture_output=True, text=True, timeout=60, cwd="/",
                    env=dict(os.environ, HOME=str(job_user.home)),
                )  # fmt: skip
            finally:
                if before != "1":
                    RESTRICT.write_text(before + "\n")
    finally:
        os.unlink(log.name)
    document = json.loads(proc.stdout)
    kernel = next(s for s in document["signals"] if s["name"] == "kernel messages")
    assert kernel["state"] == "refused", kernel
    dmesg, journal = kernel["detail"].split("; ", 1)
    assert dmesg == "dmesg: dmesg: read kernel buffer failed: Operation not permitted"
    assert journal.startswith("journalctl: ")  # the fallback was asked: its own answer
    assert kernel["detail"].endswith(
        "(reading kernel messages needs root or CAP_SYSLOG: kernel.dmesg_restrict)"
    )


SLURM_OUTPUT = """\
[rank0]:[W1126 00:39:58] step 1200 loss 2.31
slurmstepd: error: *** STEP 2180718.0 ON gpu001 CANCELLED AT 2026-11-26T00:40:01 DUE TO TIME LIMIT ***
slurmstepd: error: *** JOB 2180718 ON gpu001 CANCELLED AT 2026-11-26T00:40:01 DUE TO TIME LIMIT ***
"""

CGROUP_OOM = """\
slurmstepd: error: Detected 1 oom-kill event(s) in StepId=2180719.0. Some of your processes may have been killed by the cgroup out-of-memory handler.
"""


def test_the_scheduler_ending_the_job_is_named(tmp_path: Path) -> None:
    """slurmstepd's lines (written for this test in its formats) in the job's output."""
    from rankscope.why.output import read_logs

    log = tmp_path / "slurm-2180718.out"
    log.write_text(SLURM_OUTPUT)
    gathered = Gathered()
    read_logs([str(log)], gathered)
    report = weigh(gathered)
    assert report.verdict is not None
    assert report.verdict.cause == "scheduler_time_limit"
    assert report.verdict.evidence[0].source == f"{log}:2"
    assert (
        "SLURM cancelled step 2180718.0 on gpu001 at 2026-11-26T00:40:01 due to time limit"
        in report.verdict.text + report.verdict.evidence[0].text
    )
    oom = tmp_path / "slurm-2180719.out"
    oom.write_text(CGROUP_OOM)
    gathered = Gathered()
    read_logs([str(oom)], gathered)
    report = weigh(gathered)
    assert report.verdict is not None and report.verdict.cause == "oom_kill"
    assert "cgroup out-of-memory handler" in report.verdict.evidence[0].text


#: A rank of another job: it says it is up, waits for a line, then reads address 0 (a real SIGSEGV,
#: which the kernel logs as ``python3[PID]: segfault at 0 ...``).
OTHER_RANK = """\
import ctypes, sys
print("up", flush=True)
sys.stdin.readline()
ctypes.string_at(0)
"""


def _no_core() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _segfault_lines(pids: set[int]) -> set[int]:
    """The pids of ``pids`` that a segfault line of the kernel names (dmesg, as `why` reads it)."""
    from rankscope.why.collect import read_kernel

    text, _, _ = read_kernel(time.monotonic() + 5)
    return {e.pid for e in parse_kernel((text or "").splitlines()) if e.kind == "segfault" and e.pid in pids}


def test_a_segfault_of_another_jobs_rank_is_not_a_rank_of_the_job(tmp_path: Path) -> None:
    """The runtime directory is shared by every job of a user: there another job's rank 9 left a
    ``.term`` dump of a pid that a process of yet another job has now (pids come round), and a rank 9
    of another job (another master port) that crashes while the job runs writes its ``.crash`` dump
    there. Both really crash; the kernel logs the first one's segfault (the second one's handler
    dumps, then raises the signal again, which the kernel does not log). `why --pid` of the job names
    neither as a rank of its own (before: "rank 9 crashed (segmentation fault)" from the kernel's line,
    "rank 9 died of a fatal signal" from the dump); the dump is left out with a note."""
    from rankscope.ranks import short_hostname

    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    base = {k: v for k, v in os.environ.items() if k != "RANKSCOPE_INPROC"}
    base.update(RANKSCOPE_RUNTIME_DIR=str(runtime), MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1")
    job = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={**base, "RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "29431"},
        start_new_session=True,
    )
    script = tmp_path / "other.py"
    script.write_text(OTHER_RANK)
    other = {**base, "RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "MASTER_PORT": "29432"}
    crashers = []
    try:
        time.sleep(1.1)  # the crashes below come after the job started (1 s of slack is allowed)
        for extra in ({}, {"RANKSCOPE_INPROC": "1"}):  # the second one writes its own crash dump
            crashers.append(
                subprocess.Popen(
                    [sys.executable, str(script)], env={**other, **extra}, cwd=tmp_path,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=_no_core, start_new_session=True,
                )
            )  # fmt: skip
        reused, crashed = (c.pid for c in crashers)
        stale = runtime / f"{short_hostname()}.rank-9.pid-{reused}.term"  # the pid's earlier owner's
        stale.write_text('Current thread 0x00007f (most recent call first):\n  File "t.py", line 3 in step\n')
        stale.chmod(0o600)
        os.utime(stale, (time.time() - 3600, time.time() - 3600))
        for crasher in crashers:
            assert crasher.stdout is not None and crasher.stdout.readline() == b"up\n"
            crasher.communicate(b"go\n", timeout=30)
            assert crasher.returncode == -signal.SIGSEGV
        assert [p.name for p in runtime.glob(f"*.pid-{crashed}.crash")], sorted(os.listdir(runtime))
        for _ in range(50):  # the kernel logs the fault as the process dies
            if _segfault_lines({reused}):
                break
            time.sleep(0.1)
        else:
            pytest.skip("the kernel logs no segfault line here (debug.exception-trace=0, or dmesg refused)")
        document = run_cli("why", "--pid", str(job.pid), "--json").json()
        named = [h for h in [document["verdict"], *document["hypotheses"]] if h and 9 in h["ranks"]]
        assert named == [], named
        kernel = next(s for s in document["signals"] if s["name"] == "kernel messages")
        assert "segfault" not in kernel["detail"], kernel  # nothing about the job
        notes = document["notes"]
        assert any(f"pid-{crashed}.crash" in n and "not one of the job's 1 ranks" in n for n in notes), notes
    finally:
        for process in [job, *crashers]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
