"""`rankscope watch` with a plain Python job (no torch): a capture asked for with SIGUSR1, SIGTERM
passed on to the job and its exit code passed back, and bad command lines."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.cli import CliResult, run_cli
from tests.support.leftovers import carrying, kill_marked, marked_env, wait_for

#: A one-rank job's variables (no launcher): the watcher takes the process itself for its worker.
RANK_ZERO = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}

JOB = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))
def waiting_for_a_signal():
    print("up", flush=True)
    while True:
        time.sleep(0.1)
waiting_for_a_signal()
"""


def run_watch(*args: str, **extra_env: str) -> CliResult:
    """`rankscope watch ARGS` as a user runs it; the job it starts (detached: it outlives the watcher
    by design) and everything else carrying the run's mark is SIGKILLed afterwards, also on a timeout."""
    env, mark = marked_env(**extra_env)
    try:
        return run_cli("watch", *args, env=env, timeout=120)
    finally:
        kill_marked(mark)


def test_usr1_captures_now_within_max_captures_and_sigterm_reaches_the_job_whose_code_comes_back(
    tmp_path: Path,
) -> None:
    env, mark = marked_env()
    out = tmp_path / "caps"
    argv = [sys.executable, "-m", "rankscope", "watch", "--out", str(out), "--max-captures", "1"]
    argv += ["--", sys.executable, "-c", JOB]
    log = tmp_path / "log"
    with open(log, "wb") as handle:
        watcher = subprocess.Popen(argv, env=env, stdout=handle, stderr=handle, start_new_session=True)
    try:
        wait_for(lambda: "up" in log.read_text(), 60, "the job")
        watcher.send_signal(signal.SIGUSR1)  # what SLURM's --signal=B:USR1@N warning becomes
        index = out / "index.jsonl"
        # the file is made before its line is written: wait for the whole line
        wait_for(lambda: index.exists() and index.read_text().endswith("\n"), 60, "the requested capture")
        [entry] = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
        assert entry["reason"] == "request"
        raw = "".join(p.read_text() for p in (out / entry["dir"]).rglob("*") if p.is_file())
        assert "waiting_for_a_signal" in raw
        watcher.send_signal(signal.SIGUSR1)  # one more: over --max-captures, only noted
        wait_for(lambda: "--max-captures 1 reached" in log.read_text(), 60, "the note")
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(60) == 42, log.read_text()
        assert len((out / "index.jsonl").read_text().splitlines()) == 1  # no death: it was told to end
        assert "rankscope watch: request" in log.read_text()
    finally:
        kill_marked(mark)
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
        watcher.wait()


def test_bad_command_lines(tmp_path: Path) -> None:
    assert run_cli("watch", "--out", str(tmp_path / "a")).returncode == 2
    assert run_cli("watch", "--pid", "1", "--out", str(tmp_path / "b"), "--", "true").returncode == 2
    assert run_cli("watch", "--pid", "1", "--jobid", "9", "--out", str(tmp_path / "b")).returncode == 2
    no_job = run_cli("watch", "--jobid", "987654321", "--out", str(tmp_path / "b"))
    assert no_job.returncode == 3 and "no Python process of SLURM job 987654321" in no_job.stderr
    gone = run_cli("watch", "--pid", "999999999", "--out", str(tmp_path / "c"))
    assert gone.returncode == 8 and "no process with pid 999999999" in gone.stderr
    missing = run_cli("watch", "--out", str(tmp_path / "d"), "--", str(tmp_path / "no-such-launcher"))
    assert missing.returncode == 6 and "no-such-launcher" in missing.stderr
    (tmp_path / "file").write_text("")
    under_a_file = run_cli("watch", "--out", str(tmp_path / "file" / "caps"), "--", "true")
    assert under_a_file.returncode == 8 and "cannot use --out" in under_a_file.stderr


def test_the_jobs_exit_code_passes_through_and_a_finished_job_leaves_nothing(tmp_path: Path) -> None:
    result = run_watch("--out", str(tmp_path / "caps"), "--", sys.executable, "-c", "raise SystemExit(5)")
    assert result.returncode == 5
    assert list((tmp_path / "caps").iterdir()) == []


STALLING = """
import time
import rankscope
for step in range(3):
    rankscope.progress(step=step)
    time.sleep(0.05)
def stuck_here():
    print("stuck", flush=True)
    while True:
        time.sleep(0.2)
stuck_here()
"""


def test_a_stall_is_confirmed_captured_and_then_kill_ends_the_job(tmp_path: Path) -> None:
    """A one-rank job (rank variables, no launcher, no torch) whose markers stop: two non-blocking
    samples agree, the capture names where it sits, and --then kill sends the job SIGTERM."""
    out = tmp_path / "caps"
    argv = ["--stall", "1", "--interval", "0.2", "--then", "kill", "--out", str(out)]
    result = run_watch(*argv, "--", sys.executable, "-c", STALLING, **RANK_ZERO)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    [entry] = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    assert entry["reason"] == "stall" and "unchanged" in entry["confirmed"]
    raw = "".join(p.read_text() for p in (out / entry["dir"]).rglob("*") if p.is_file())
    assert "stuck_here" in raw
    assert "rankscope watch: --then kill: SIGTERM to the job" in result.stderr


COMPUTING = """
import time
import rankscope
for step in range(3):
    rankscope.progress(step=step)
    time.sleep(0.05)
print("computing", flush=True)
end = time.monotonic() + 8
while time.monotonic() < end: sum(range(20000))  # one line: the same stack at every sample
"""


def test_a_long_step_computing_on_one_line_is_captured_but_not_killed(tmp_path: Path) -> None:
    """Seen on a real 2-rank DDP job with an evaluation step longer than --stall: its markers (here)
    or output stop and its stacks stand still (one native call, one line), so the stall was
    confirmed and --then kill ended a healthy job. Its rank ran on the CPU all along and `why` found
    nothing wrong: a long step, noted, never killed; the job ends by itself."""
    out = tmp_path / "caps"
    argv = ["--stall", "1", "--interval", "0.2", "--then", "kill", "--out", str(out)]
    result = run_watch(*argv, "--", sys.executable, "-c", COMPUTING, **RANK_ZERO)
    assert result.returncode == 0, result.stderr
    [entry] = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    assert entry["reason"] == "stall" and "on the CPU" in entry["confirmed"], entry
    assert entry["verb"] == "why" and "not a stall" in entry["cleared"], entry
    assert "a long step, not a stall; watching on" in result.stderr
    assert "--then kill" not in result.stderr, result.stderr


def test_a_job_with_nothing_to_watch_is_told_once_and_never_captured(tmp_path: Path) -> None:
    """Output into a pipe (not a file) and no markers: no stall can be seen, and the watcher says so."""
    argv = ["--stall", "1", "--interval", "0.2", "--out", str(tmp_path / "caps")]
    result = run_watch(*argv, "--", sys.executable, "-c", "import time; time.sleep(4)", **RANK_ZERO)
    assert result.returncode == 0, result.stderr
    told = "no progress markers (rankscope.progress), no output files and no flight recorders"
    assert result.stderr.count(told) == 1 and "for 1 s: a stall is noticed once one appears" in result.stderr
    assert list((tmp_path / "caps").iterdir()) == []


BUSY_WITHOUT_MARKERS = """
import time
import rankscope
rankscope.progress(step=0)
def descend(depth):
    if depth:
        return descend(depth - 1)
    time.sleep(0.05)
end = time.monotonic() + 4
while time.monotonic() < end:  # working, no more markers: the stack grows 0.1 s by 0.1 s
    descend(int(time.monotonic() * 10) % 60)
"""


def test_quiet_ranks_whose_stacks_move_are_no_stall(tmp_path: Path) -> None:
    argv = ["--stall", "1", "--interval", "0.2", "--out", str(tmp_path / "caps")]
    result = run_watch(*argv, "--", sys.executable, "-c", BUSY_WITHOUT_MARKERS, **RANK_ZERO)
    assert result.returncode == 0, result.stderr
    assert "but the ranks' stacks move" in result.stderr
    assert list((tmp_path / "caps").iterdir()) == [], result.stderr


TWO_RANKS = """
import os, signal, subprocess, sys, time
RANK = '''
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))
os.write(1, ("up %s\\\\n" % os.environ["RANK"]).encode())  # one write: the two ranks share the log
def rank_work():
    while not (os.environ["RANK"] == "1" and os.path.exists("die")):
        time.sleep(0.05)
    sys.exit(3)
rank_work()
'''
signal.signal(signal.SIGTERM, lambda *_: None)  # the ranks' codes tell how the job ended
env = {**os.environ, "WORLD_SIZE": "2"}
ranks = [subprocess.Popen([sys.executable, "-c", RANK], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
         for r in (0, 1)]
codes = {}
while len(codes) < 2:  # a launcher that looks at its ranks twice a second, as torchrun's monitor does
    time.sleep(0.5)
    for rank in ranks:
        if rank.pid not in codes and rank.poll() is not None:
            codes[rank.pid] = rank.returncode
sys.exit(codes[ranks[0].pid])
"""


def test_a_death_during_a_capture_is_seen_at_once_queued_captured_and_then_kill_ends_the_job(
    tmp_path: Path,
) -> None:
    """A launcher-like script with two ranks (no torch). While a capture asked for with SIGUSR1 runs,
    rank 1 exits with code 3: the watcher reads that code from the exit at once (its parent reaps it
    within 0.5 s, long before the capture ends), captures the death once the first capture is done,
    and --then kill ends rank 0, whose code (42) the job passes back."""
    env, mark = marked_env()
    out = tmp_path / "caps"
    argv = [sys.executable, "-m", "rankscope", "watch", "--out", str(out), "--interval", "0.2"]
    argv += ["--stall", "600", "--then", "kill", "--", sys.executable, "-c", TWO_RANKS]
    log = tmp_path / "log"
    with open(log, "wb") as handle:
        watcher = subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=handle, stderr=handle, start_new_session=True
        )
    try:
        wait_for(
            lambda: "up 0" in log.read_text() and "up 1" in log.read_text(),
            60,
            "the ranks",
            shown=lambda: f"{log.read_text()}\nprocesses of the test: {carrying(mark)}",
        )
        # Ten looks of the watcher (--interval 0.2) on an idle machine; CI once stopped it after 0.6 s
        # with only rank 0 seen, so the rank it names may be 0 alone there.
        time.sleep(2.0)
        watcher.send_signal(signal.SIGUSR1)
        wait_for(
            lambda: any(p.name.endswith("-request") for p in out.iterdir()),
            60,
            "the capture",
            shown=log.read_text,
        )
        (tmp_path / "die").touch()  # rank 1 ends while the capture runs
        assert watcher.wait(120) == 42, log.read_text()
        entries = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
        assert [e["reason"] for e in entries] == ["request", "death"], (entries, log.read_text())
        death = entries[1]
        assert death["trigger_ranks"] == [1] and "exited with code 3" in str(death["trigger"])
        text = log.read_text()
        assert "death (rank 1 (pid" in text and "queued behind the running capture (request)" in text
        assert "rankscope watch: --then kill: SIGTERM to the job" in text
    finally:
        kill_marked(mark)
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
        watcher.wait()


EARLY_RANK = """
import os, subprocess, sys, time
RANK = '''
import os, sys, time
os.write(1, ("up %s\\\\n" % os.environ["RANK"]).encode())
time.sleep(4.0)  # long enough for a watcher on a loaded machine to have found both ranks
if os.environ["RANK"] == "1":
    sys.exit(0)  # returns early
time.sleep(1.0)
sys.exit(3)  # its peer is gone
'''
env = {**os.environ, "WORLD_SIZE": "2"}
ranks = [subprocess.Popen([sys.executable, "-c", RANK], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
         for r in (0, 1)]
while any(rank.poll() is None for rank in ranks):  # a launcher that looks at its ranks every 2 s
    time.sleep(2.0)
sys.exit(max(rank.returncode for rank in ranks))
"""


def test_a_job_that_fails_after_a_rank_returned_early_names_that_rank_and_no_culprit(tmp_path: Path) -> None:
    """Seen on a real 2-rank gloo job: rank 1 returned before the last barrier (exit 0), rank 0's
    barrier failed, and the job's `end` capture said only "[culprit rank 0]", the victim. It names
    rank 1's early exit and no culprit (a launcher-like script, no torch). The script reaps its ranks
    every 2 s (it was twice a second: on a loaded CI machine the watcher once read neither exit code
    before the reaping, and with no code and no output file nothing was captured)."""
    out = tmp_path / "caps"
    argv = ["--out", str(out), "--interval", "0.2", "--stall", "600"]
    result = run_watch(*argv, "--", sys.executable, "-c", EARLY_RANK)
    assert result.returncode == 3, result.stderr
    [entry] = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    assert entry["reason"] == "end" and entry["trigger_ranks"] == [0], entry
    trigger = str(entry["trigger"])
    assert "rank 1 (pid" in trigger and "exited with code 0 while the others still ran" in trigger, entry
    assert entry["ranks"] == [], entry
    assert "culprit" not in result.stderr, result.stderr


RESTARTING = """
import os, subprocess, sys, time
RANK = '''
import os, sys, time
os.write(1, ("up %s %s\\\\n" % (os.environ["ATTEMPT"], os.environ["RANK"])).encode())
while not os.path.exists("fail") and os.environ["ATTEMPT"] == "0":
    time.sleep(0.05)
time.sleep(3 if os.environ["ATTEMPT"] == "1" else 0)
sys.exit(1 if os.environ["ATTEMPT"] == "0" else 0)
'''
for attempt in ("0", "1"):  # a launcher that reaps its ranks at once and restarts a failed attempt
    env = {**os.environ, "WORLD_SIZE": "2", "ATTEMPT": attempt}
    ranks = [subprocess.Popen([sys.executable, "-c", RANK], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
             for r in (0, 1)]
    codes = [rank.wait() for rank in ranks]
sys.exit(max(codes))
"""


def test_a_restart_after_workers_reaped_before_their_codes_were_read_is_a_death(tmp_path: Path) -> None:
    """Seen on a real torchrun --max-restarts 1 job on a loaded machine: attempt 0's two ranks
    failed and were reaped by torchrun before the watcher read their exit codes; the job records no
    progress markers, so nothing said they failed, and no death was captured. The launcher starting
    new workers says it. Here the watcher is stopped (SIGSTOP) while attempt 0 fails and the
    launcher, which reaps at once, restarts it (no torch)."""
    env, mark = marked_env()
    out = tmp_path / "caps"
    argv = [sys.executable, "-m", "rankscope", "watch", "--out", str(out), "--interval", "0.2"]
    argv += ["--stall", "600", "--", sys.executable, "-c", RESTARTING]
    log = tmp_path / "log"
    with open(log, "wb") as handle:
        watcher = subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=handle, stderr=handle, start_new_session=True
        )
    try:
        wait_for(lambda: "up 0 0" in log.read_text() and "up 0 1" in log.read_text(), 60, "attempt 0")
        # Ten looks of the watcher (--interval 0.2) on an idle machine; CI once stopped it after 0.6 s
        # with only rank 0 seen, so the rank it names may be 0 alone there.
        time.sleep(2.0)
        watcher.send_signal(signal.SIGSTOP)
        (tmp_path / "fail").touch()
        wait_for(lambda: "up 1 0" in log.read_text() and "up 1 1" in log.read_text(), 60, "attempt 1")
        watcher.send_signal(signal.SIGCONT)
        assert watcher.wait(120) == 0, log.read_text()
        entries = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
        assert [e["reason"] for e in entries] == ["death"], (entries, log.read_text())
        trigger = str(entries[0]["trigger"])
        assert re.search(
            r"the launcher started new workers after (ranks 0-1|rank 0|rank 1) ended", trigger
        ), trigger
    finally:
        watcher.send_signal(signal.SIGCONT)
        kill_marked(mark)
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
        watcher.wait()
