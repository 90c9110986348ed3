"""Pruning the runtime directory: real files and FIFOs in a private directory, real processes for
live and reused pids, the real command line (`rankscope runtime prune`, and `stacks` pruning once a
day by itself)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli

from rankscope.inproc import prune, runtime, stale
from rankscope.ranks import short_hostname

HOST = short_hostname()
DAY = 86400.0


@pytest.fixture
def rundir(tmp_path: Path) -> Path:
    directory = tmp_path / "rankscope-run"
    directory.mkdir(mode=0o700)
    return directory


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A live process (its own group, killed by group at the end)."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        yield process.pid
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def dead_pid() -> int:
    """A pid no process has: one that ran and was reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def plant(directory: Path, name: str, days_ago: float = 0.0, fifo: bool = False) -> Path:
    path = directory / name
    if fifo:
        os.mkfifo(path, 0o600)
    else:
        path.write_text("x")
        path.chmod(0o600)
    if days_ago:
        when = time.time() - days_ago * DAY
        os.utime(path, (when, when))
    return path


def env_with(directory: Path) -> dict[str, str]:
    return {**os.environ, runtime.ENV_DIR: str(directory)}


# --- the rule ------------------------------------------------------------------------------------


def test_the_rule_keeps_recent_files_live_processes_and_other_hosts() -> None:
    now = 100 * DAY
    keep = 7 * DAY

    def seen(written: float, alive: bool, started: float | None = None, host: str = "h") -> stale.Seen:
        return stale.Seen("f", host, 42, "progress", written, alive, started)

    assert stale.verdict(seen(now - 8 * DAY, alive=False), "h", now, keep) == stale.ENDED
    assert stale.verdict(seen(now - 6 * DAY, alive=False), "h", now, keep) is None  # a recent crash dump
    assert stale.verdict(seen(now - 8 * DAY, alive=False, host="other"), "h", now, keep) is None
    assert stale.verdict(seen(now - 8 * DAY, True, now - 9 * DAY), "h", now, keep) is None  # its own writer
    assert stale.verdict(seen(now - 8 * DAY, True, now - DAY), "h", now, keep) == stale.REUSED
    assert stale.verdict(seen(now - 8 * DAY, True, None), "h", now, keep) is None  # start unknown: kept
    in_a_container = stale.Seen("f", "h", 42, "req", now - 8 * DAY, False, None, elsewhere=True)
    assert stale.verdict(in_a_container, "h", now, keep) is None
    # a start just after the write is within the clocks' slack: the writer itself
    assert stale.verdict(seen(now - 8 * DAY, True, now - 8 * DAY + 60), "h", now, keep) is None


# --- the file system -----------------------------------------------------------------------------


def test_a_stale_file_of_an_ended_process_goes_and_a_recent_crash_dump_stays(rundir: Path) -> None:
    pid = dead_pid()
    old = plant(rundir, runtime.file_name(HOST, pid, "progress", 3), days_ago=10)
    fifo = plant(rundir, runtime.file_name(HOST, pid, "req", 3), days_ago=10, fifo=True)
    crash = plant(rundir, runtime.file_name(HOST, pid, "crash", 3), days_ago=2)
    result = prune.prune(str(rundir))
    assert sorted(r.name for r in result.removed) == sorted([old.name, fifo.name])
    assert {r.reason for r in result.removed} == {stale.ENDED}
    assert not old.exists() and not fifo.exists()
    assert crash.exists() and result.kept == 1


def test_a_live_process_s_files_stay_and_a_reused_pid_s_older_file_goes(rundir: Path, sleeper: int) -> None:
    own = plant(rundir, runtime.file_name(HOST, sleeper, "inproc", 0))  # written since it started
    earlier = plant(
        rundir, runtime.file_name(HOST, sleeper, "term", 5), days_ago=30
    )  # the pid's earlier owner
    ended = plant(rundir, runtime.file_name(HOST, dead_pid(), "progress"))
    result = prune.prune(str(rundir), keep_days=0)
    assert {r.name: r.reason for r in result.removed} == {earlier.name: stale.REUSED, ended.name: stale.ENDED}
    assert own.exists() and not earlier.exists() and not ended.exists()


def test_links_directories_other_hosts_and_foreign_names_are_never_touched(
    rundir: Path, tmp_path: Path
) -> None:
    pid = dead_pid()
    target = tmp_path / "precious"
    target.write_text("keep me")
    link = rundir / runtime.file_name(HOST, pid, "term")
    link.symlink_to(target)
    os.utime(link, (0, 0), follow_symlinks=False)
    os.utime(target, (0, 0))
    subdir = rundir / runtime.file_name(HOST, pid, "fr")
    subdir.mkdir()
    os.utime(subdir, (0, 0))
    foreign = plant(rundir, "notes.txt", days_ago=100)
    elsewhere = plant(rundir, runtime.file_name("another-node", pid, "progress"), days_ago=100)
    result = prune.prune(str(rundir), keep_days=0)
    assert result.removed == [] and result.untouched == 3 and result.kept == 1
    assert link.is_symlink() and target.read_text() == "keep me"
    assert subdir.is_dir() and foreign.exists() and elsewhere.exists()


@pytest.mark.parametrize("same_namespace", [True, False])
def test_a_process_of_another_pid_namespace_is_not_judged_by_this_one(
    rundir: Path, same_namespace: bool
) -> None:
    """A container sharing the directory: its pids mean nothing in this process table, so the files of
    a process whose description names another pid namespace stay, however old."""
    import json

    from rankscope import procfs

    pid = dead_pid()
    namespace = procfs.pid_namespace() if same_namespace else 1
    description = plant(rundir, runtime.file_name(HOST, pid, "inproc", 0), days_ago=10)
    description.write_text(json.dumps({"pid": pid, "pid_namespace": namespace}))
    os.utime(description, (time.time() - 10 * DAY, time.time() - 10 * DAY))
    fifo = plant(rundir, runtime.file_name(HOST, pid, "req", 0), days_ago=10, fifo=True)
    result = prune.prune(str(rundir))
    if same_namespace:
        assert len(result.removed) == 2 and not description.exists() and not fifo.exists()
    else:
        assert result.removed == [] and result.kept == 2 and description.exists() and fifo.exists()


def test_the_oldest_go_first_within_the_limit(rundir: Path) -> None:
    pid = dead_pid()
    names = [
        plant(rundir, runtime.file_name(HOST, pid, f"{i}.reply"), days_ago=10 + i).name for i in range(5)
    ]
    result = prune.prune(str(rundir), limit=2)
    assert [r.name for r in result.removed] == [names[4], names[3]] and result.left == 3
    assert sorted(os.listdir(rundir)) == sorted(names[:3])


def test_a_file_gone_or_rewritten_before_its_removal_is_counted_not_raised(rundir: Path) -> None:
    """The race between judging and unlinking, played in order: the file vanishes, or a process
    writes it again (it is live after all): neither is removed nor an error."""
    path = plant(rundir, runtime.file_name(HOST, dead_pid(), "progress"), days_ago=10)
    fd = prune.open_own_dir(str(rundir))
    try:
        judged = os.stat(path.name, dir_fd=fd, follow_symlinks=False)
        os.utime(path, None)
        assert prune._unlink(fd, path.name, judged) == "" and path.exists()
        path.unlink()
        assert prune._unlink(fd, path.name, judged) == ""
    finally:
        os.close(fd)


def test_once_a_day_at_most(rundir: Path) -> None:
    first = plant(rundir, runtime.file_name(HOST, dead_pid(), "progress"), days_ago=10)
    done = prune.prune_daily(str(rundir))
    assert done is not None and [r.name for r in done.removed] == [first.name]
    second = plant(rundir, runtime.file_name(HOST, dead_pid(), "progress"), days_ago=10)
    assert prune.prune_daily(str(rundir)) is None and second.exists()  # pruned today already
    stamp = rundir / prune.STAMP
    os.utime(stamp, (time.time() - 2 * DAY, time.time() - 2 * DAY))
    done = prune.prune_daily(str(rundir))
    assert done is not None and [r.name for r in done.removed] == [second.name]
    assert stamp.exists() and runtime.parse_name(stamp.name) is None  # never read as a process's file


_GATE = """
import sys
from rankscope.cli.daily_prune import after_report
after_report()
print("rankscope.inproc.prune" in sys.modules)
"""


def test_a_command_imports_the_pruning_only_on_the_day_it_is_due(rundir: Path) -> None:
    """`stacks` is timed to its exit: on a day the directory was pruned already, the command's last
    step is a stat, not the pruning's import."""
    env = {**os.environ, runtime.ENV_DIR: str(rundir)}

    def gate() -> str:
        done = subprocess.run(
            [sys.executable, "-c", _GATE], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    old = plant(rundir, runtime.file_name(HOST, dead_pid(), "progress"), days_ago=10)
    assert gate() == "True" and not old.exists()  # never pruned: due, and done
    assert gate() == "False"  # pruned today: one stat
    stamp = rundir / runtime.PRUNE_STAMP
    os.utime(stamp, (time.time() - 2 * runtime.PRUNE_EVERY,) * 2)
    assert gate() == "True"
    assert runtime.PRUNE_STAMP == prune.STAMP and runtime.PRUNE_EVERY == stale.DAY


def test_an_unsafe_directory_is_never_pruned(rundir: Path, tmp_path: Path) -> None:
    old = plant(rundir, runtime.file_name(HOST, dead_pid(), "progress"), days_ago=10)
    rundir.chmod(0o770)
    with pytest.raises(runtime.UnsafeDirectory):
        prune.prune(str(rundir))
    assert prune.prune_daily(str(rundir)) is None and old.exists()
    rundir.chmod(0o700)
    link = tmp_path / "link"
    link.symlink_to(rundir)
    with pytest.raises(runtime.UnsafeDirectory):
        prune.prune(str(link))
    assert prune.prune_daily(str(link)) is None and old.exists()


def test_a_training_process_never_imports_the_pruning(rundir: Path) -> None:
    code = (
        "import sys, rankscope.inproc.handler as h, rankscope.inproc.progress, rankscope.inproc.bootstrap;"
        "h.enable(); print(sorted(m for m in sys.modules if m.startswith('rankscope.inproc.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env_with(rundir)
    )
    assert "rankscope.inproc.handler" in done.stdout
    assert "prune" not in done.stdout and "stale" not in done.stdout


# --- the command line ----------------------------------------------------------------------------


def test_dry_run_lists_and_removes_nothing_then_prune_removes(rundir: Path) -> None:
    pid = dead_pid()
    old = plant(rundir, runtime.file_name(HOST, pid, "progress", 1), days_ago=9)
    recent = plant(rundir, runtime.file_name(HOST, pid, "crash", 1), days_ago=1)
    dry = run_cli("runtime", "prune", "--dry-run", env=env_with(rundir))
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"{rundir}: would remove 1 file of ended processes (last written over 7 days ago); kept 1,"
        " left 0 other names alone",
        f"  {old.name}  (its process ended; 9 days old)",
    ]
    assert old.exists() and recent.exists()
    done = run_cli("runtime", "prune", "--json", "--older-than", "0.5", env=env_with(rundir))
    assert done.returncode == 0, done.stderr
    document = done.json()
    assert document["schema"] == "rankscope.runtime.prune/1" and not document["dry_run"]
    assert sorted(r["name"] for r in document["removed"]) == sorted([old.name, recent.name])
    assert os.listdir(rundir) == []


def test_a_directory_open_to_the_group_is_refused_in_one_line(rundir: Path) -> None:
    rundir.chmod(0o770)
    result = run_cli("runtime", "prune", "--dir", str(rundir))
    assert result.returncode == 8 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"rankscope: error: {rundir} is not your private runtime directory: mode 770 is open to group"
        " or others — rankscope prunes only a real directory of your own with mode 0700 (run it as its owner)"
    ]


def test_another_user_s_directory_is_refused_in_one_line(rundir: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("giving a directory to another uid needs root")
    old = plant(rundir, runtime.file_name(HOST, dead_pid(), "progress"), days_ago=10)
    os.chown(rundir, 65534, -1)
    result = run_cli("runtime", "prune", "--dir", str(rundir))
    assert result.returncode == 8 and len(result.stderr.splitlines()) == 1
    assert f"{rundir} is not your private runtime directory: owned by uid 65534, not 0" in result.stderr
    assert old.exists()


def test_a_missing_directory_is_nothing_to_prune_unless_named(rundir: Path) -> None:
    absent = rundir / "never-made"
    quiet = run_cli("runtime", "prune", env=env_with(absent))
    assert quiet.returncode == 0 and "removed 0 files" in quiet.stdout
    named = run_cli("runtime", "prune", "--dir", str(absent))
    assert named.returncode == 8
    assert (
        named.stderr.strip() == f"rankscope: error: {absent}: no such directory — name your runtime directory"
    )


@pytest.mark.parametrize("verb", ["stacks", "why", "watch"])
def test_the_commands_that_list_the_directory_prune_it_after_their_report(
    rundir: Path, sleeper: int, verb: str
) -> None:
    """The automatic run: after the report of a command that lists the directory, once a day
    (each command on a target that is cheap to judge: a dead pid, a process that is not Python, a
    job that ends at once)."""
    args = {
        "stacks": ["stacks", "--pid", str(dead_pid())],
        "why": ["why", "--pid", str(sleeper)],
        "watch": ["watch", "--out", str(rundir.parent / "captures"), "--", "true"],
    }[verb]
    old = plant(rundir, runtime.file_name(HOST, dead_pid(), "progress"), days_ago=10)
    result = run_cli(*args, env=env_with(rundir))
    assert result.returncode == {"stacks": 8, "why": 4, "watch": 0}[verb], result.stderr + result.stdout
    assert not old.exists() and (rundir / prune.STAMP).exists()
    if verb == "stacks":
        again = plant(rundir, runtime.file_name(HOST, dead_pid(), "progress"), days_ago=10)
        assert run_cli(*args, env=env_with(rundir)).returncode == 8
        assert again.exists()  # not twice a day
