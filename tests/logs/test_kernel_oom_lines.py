"""The kernel's OOM-killer lines pasted into a job's log (dmesg's and journalctl's forms, as
mm/oom_kill.c prints them): a launcher's SIGKILL of the pid they name is that kill (host memory, how
much the process held); a Python process killed that no launcher line names is a finding of its own;
another program's kill is not. Logs written here; pure reading through `logs errors` and `why`."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli, run_cli_here
from tests.support.deepspeed_text import deepspeed_node
from tests.support.line_findings import line_findings

from rankscope.logs.kernel_oom import oom_kill

FAILED = (
    "E1120 10:05:00.300000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) "
    "local_rank: 2 (pid: 4123) of binary: /usr/bin/python3\n"
)
DMESG = (
    "[Thu Nov 20 10:04:59 2026] Out of memory: Killed process {pid} ({comm}) total-vm:98765432kB, "
    "anon-rss:61234567kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:123456kB oom_score_adj:0\n"
)
JOURNAL = (
    "2026-11-20T10:04:59+0000 gpu-07 kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),"
    "task=python3,pid=4123,uid=0\n"
    "2026-11-20T10:04:59+0000 gpu-07 kernel: Out of memory: Killed process 4123 (python3) total-vm:1000kB, "
    "anon-rss:524288kB, file-rss:0kB\n"
)


def test_the_launcher_s_sigkill_of_the_killed_pid_is_the_oom_killer_s(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("[rank0]: step 100\n" + FAILED + DMESG.format(pid=4123, comm="python3"))
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["who"]) == ("oom_kill", "2")
    assert verdict["what"] == (
        "torchrun: local rank 2 (pid 4123) was killed by the kernel's OOM killer, "
        "58.4 GiB of host memory in use (anon-rss)"
    )
    assert verdict["next_step"].startswith("host memory, not GPU memory")
    why = run_cli_here("why", "--log", str(log), "--json").json()["verdict"]
    assert why["text"].startswith("local rank 2 was killed by the kernel's OOM killer"), why


def test_journalctl_s_form_and_its_summary_line_give_one_kill() -> None:
    found = [f for f in line_findings("[rank0]: step 1\n" + FAILED + JOURNAL) if f.cause == "oom_kill"]
    assert [(f.who, f.what.endswith("512 MiB of host memory in use (anon-rss)")) for f in found] == [
        ("2", True)
    ]


def test_a_killed_python_process_without_a_launcher_line_is_a_finding_and_another_program_is_not() -> None:
    text = "[rank0]: step 1\n" + DMESG.format(pid=777, comm="python3") + DMESG.format(pid=778, comm="chrome")
    found = [f for f in line_findings(text) if f.cause == "oom_kill"]
    assert [f.what for f in found] == [
        "the kernel's OOM killer killed python3 (pid 777), 58.4 GiB of host memory in use (anon-rss)"
    ]


def test_another_pid_s_sigkill_stays_a_sigkill() -> None:
    found = line_findings("[rank0]: step 1\n" + FAILED + DMESG.format(pid=9999, comm="python3"))
    assert {f.cause for f in found if f.who == "2"} == {"sigkill"}


def test_the_line_reader_takes_the_kernel_s_words_only() -> None:
    assert oom_kill("Out of memory: Killed process 12 (pt_main_thread) anon-rss:2048kB") == (
        12,
        "pt_main_thread",
        "2 MiB",
    )
    assert oom_kill("Killed process 12 (python3)") is None  # not the kernel's sentence
    assert oom_kill("Memory cgroup out of memory: Killed process 5 (python)") == (5, "python", None)


def test_deepspeed_s_worker_killed_by_the_kernel_is_named_by_its_spawn_line(tmp_path: Path) -> None:
    """DeepSpeed's report names the last worker it started (local rank 3), not the one that died; the
    kernel's line names the pid, and the launcher's spawn line of that pid its local rank."""
    log = tmp_path / "job.log"
    log.write_text(deepspeed_node(4, "", code=-9) + DMESG.format(pid=5001, comm="python3"))
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["who"]) == ("oom_kill", "1")
    assert verdict["what"] == (
        "deepspeed: local rank 1 (pid 5001) was killed by the kernel's OOM killer, "
        "58.4 GiB of host memory in use (anon-rss)"
    )
    # without the kernel's line: a local rank, which one unknown
    log.write_text(deepspeed_node(4, "", code=-9))
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["who"]) == ("sigkill", None)
    assert verdict["what"].startswith("deepspeed: a local rank was killed by signal 9 (its launcher's line")
