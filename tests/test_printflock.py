"""printflock on a shared node: several users, hostile lock files, planted symlinks.

Each case runs real processes; those acting as other users drop to their uid before
importing rankscope. The test itself must run as root to switch users.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

NOBODY = 65534
ATTACKER = 65533

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@functools.cache
def _stdlib_used() -> str:
    """The standard modules ``rankscope.inproc`` loads, to import before dropping to another uid.

    The interpreter may live where only root can read (a pyenv under /root); on a node where it
    is readable by everyone this preloading changes nothing. rankscope itself is imported after.
    """
    code = (
        "import sys; before = set(sys.modules); from rankscope.inproc import printflock, prefix_output, Tee; "
        "print(' '.join(sorted(m for m in set(sys.modules) - before if not m.startswith('rankscope'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return ", ".join(out.stdout.split())


def _code(uid: int, body: str) -> str:
    drop = (
        "" if uid == 0 else f"import {_stdlib_used()}\nos.setgroups([]); os.setgid({uid}); os.setuid({uid})\n"
    )
    return "import os, sys, fcntl, time\n" + drop + textwrap.dedent(body)


def _env(shared: Path, lock_file: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RANKSCOPE_PRINTFLOCK_FILE"}
    env["TMPDIR"] = str(shared)
    if lock_file is not None:
        env["RANKSCOPE_PRINTFLOCK_FILE"] = lock_file
    return env


def _print_as(
    uid: int, shared: Path, lines: int = 1, lock_file: str | None = None
) -> subprocess.CompletedProcess[str]:
    """A process of ``uid`` calls printflock ``lines`` times; a hang is a failure (timeout)."""
    body = f"""
        from rankscope.inproc import printflock
        for i in range({lines}):
            printflock("line", i, "of uid", os.getuid())
    """
    return subprocess.run(
        [sys.executable, "-c", _code(uid, body)],
        capture_output=True,
        text=True,
        timeout=30,
        env=_env(shared, lock_file),
    )


def _expected(uid: int, lines: int) -> str:
    return "".join(f"line {i} of uid {uid}\n" for i in range(lines))


@pytest.fixture
def shared() -> Iterator[Path]:
    """A world-writable sticky directory, like /tmp, that every uid can reach."""
    path = Path(tempfile.mkdtemp(prefix="rankscope-shared-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class _Holder:
    """A process of ``uid`` that (optionally creates and) holds an exclusive flock on ``path``."""

    def __init__(self, uid: int, path: Path, create_mode: int | None = None) -> None:
        body = f"""
            import fcntl, sys, time
            path = {str(path)!r}
            mode = {create_mode!r}
            if mode is not None:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
                os.fchmod(fd, mode)
            else:
                fd = os.open(path, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print("ready", flush=True)
            time.sleep(120)
        """
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _code(uid, body)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if ready != "ready\n":
            raise AssertionError(f"lock holder did not start: {ready!r} {self.close()!r}")

    def close(self) -> str:
        """Kills the holder; its stderr."""
        self.proc.kill()
        return self.proc.communicate(timeout=30)[1]


def test_root_then_another_user_both_print(shared: Path) -> None:
    root = _print_as(0, shared)
    assert (root.returncode, root.stdout, root.stderr) == (0, _expected(0, 1), "")
    other = _print_as(NOBODY, shared, lines=3)
    assert (other.returncode, other.stdout, other.stderr) == (0, _expected(NOBODY, 3), "")
    for uid in (0, NOBODY):
        info = (shared / f"rankscope-printflock-{uid}.lock").lstat()
        assert stat.S_ISREG(info.st_mode) and info.st_uid == uid and info.st_mode & 0o777 == 0o600


def test_one_lock_file_named_for_two_users_prints_unlocked_with_one_warning(shared: Path) -> None:
    lock = str(shared / "team.lock")
    assert _print_as(0, shared, lock_file=lock).returncode == 0  # root creates it 0600
    other = _print_as(NOBODY, shared, lines=3, lock_file=lock)
    assert (other.returncode, other.stdout) == (0, _expected(NOBODY, 3))
    warnings = other.stderr.splitlines()
    assert len(warnings) == 1 and lock in warnings[0] and "printing without it" in warnings[0], other.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("victim", [0, NOBODY])
@pytest.mark.parametrize("mode", [0o666, 0o600])
def test_lock_file_planted_and_held_by_another_user(shared: Path, victim: int, mode: int) -> None:
    """The attacker creates the victim's lock file first and holds it: the victim still prints."""
    planted = shared / f"rankscope-printflock-{victim}.lock"
    holder = _Holder(ATTACKER, planted, create_mode=mode)
    try:
        result = _print_as(victim, shared, lines=2)
    finally:
        holder.close()
    assert (result.returncode, result.stdout) == (0, _expected(victim, 2))
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1 and str(planted) in warnings[0], result.stderr
    info = planted.lstat()
    assert (info.st_uid, info.st_mode & 0o777) == (ATTACKER, mode)  # left as it was


@pytest.mark.timeout(120)
def test_symlink_at_lock_path_is_never_followed(shared: Path, tmp_path: Path) -> None:
    """A symlink to a root file (held locked, so following it would hang) and a dangling one."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    missing = tmp_path / "would-be-created"
    plant = f"""
        os.symlink({str(victim)!r}, {str(shared / "rankscope-printflock-0.lock")!r})
        os.symlink({str(missing)!r}, {str(shared / "dangling.lock")!r})
    """
    subprocess.run([sys.executable, "-c", _code(ATTACKER, plant)], check=True, timeout=30)
    holder = _Holder(0, victim)
    try:
        result = _print_as(0, shared, lines=2)
    finally:
        holder.close()
    assert (result.returncode, result.stdout) == (0, _expected(0, 2))
    assert len(result.stderr.splitlines()) == 1, result.stderr
    dangling = _print_as(0, shared, lock_file=str(shared / "dangling.lock"))
    assert (dangling.returncode, dangling.stdout) == (0, _expected(0, 1))
    assert not missing.exists()
    assert victim.read_text() == "precious\n" and victim.stat().st_mode & 0o777 == 0o644
    assert os.readlink(shared / "rankscope-printflock-0.lock") == str(victim)


@pytest.mark.parametrize("kind", ["missing directory", "directory", "fifo"])
def test_unusable_lock_path_prints_unlocked(shared: Path, tmp_path: Path, kind: str) -> None:
    if kind == "missing directory":
        lock = tmp_path / "nowhere" / "lock"
    elif kind == "directory":
        lock = tmp_path
    else:
        lock = tmp_path / "fifo"
        os.mkfifo(lock, 0o600)
    result = _print_as(0, shared, lines=3, lock_file=str(lock))
    assert (result.returncode, result.stdout) == (0, _expected(0, 3))
    assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.timeout(120)
def test_another_users_ranks_still_exclude_each_other(shared: Path) -> None:
    """4 forked processes of uid 65534, default lock path; each line reaches the file in 401 writes."""
    out = shared / "job.log"
    body = f"""
        from rankscope.inproc import printflock
        class Sink:  # unbuffered: every piece print hands over is its own write(2)
            def __init__(self):
                self.fd = os.open({str(out)!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            def write(self, text):
                return os.write(self.fd, text.encode())
            def flush(self):
                pass
        sink = Sink()
        pids = []
        for p in range(4):
            pid = os.fork()
            if pid == 0:
                piece = chr(65 + p) * 50
                for i in range(50):
                    printflock(*[piece] * 400, sep="", file=sink)
                os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
    """
    result = subprocess.run(
        [sys.executable, "-c", _code(NOBODY, body)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(shared),
    )
    assert (result.returncode, result.stderr) == (0, "")
    lines = out.read_text().splitlines()
    assert sorted("".join(sorted(set(line))) for line in lines) == [c for c in "ABCD" for _ in range(50)]
    assert {len(line) for line in lines} == {50 * 400}
    assert (shared / f"rankscope-printflock-{NOBODY}.lock").stat().st_uid == NOBODY
