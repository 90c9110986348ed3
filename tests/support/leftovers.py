"""What a rankscope run left behind: processes carrying a mark, a target's state, temporary paths.

A test starts rankscope with :func:`marked_env` (a variable with a fresh value that every process
rankscope starts inherits, whatever session or parent it ends up in), kills it, then asks
:func:`wait_gone` for what still carries the mark. Processes of other runs on the same machine
(other gdb, strace or torchrun) never carry it, so the check is exact on a shared machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

MARK = "RANKSCOPE_TEST_LEFTOVER_MARK"


def marked_env(**extra: str) -> tuple[dict[str, str], str]:
    """The environment to start rankscope with, and its mark."""
    mark = uuid.uuid4().hex
    return {**os.environ, MARK: mark, **extra}, mark


def _stat(pid: int) -> tuple[str, str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    return text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2]


def carrying(mark: str, skip: tuple[int, ...] = ()) -> list[tuple[int, str]]:
    """(pid, command name) of every live (not zombie) process whose environment has the mark."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        stat = _stat(int(name))
        if needle in environ and stat is not None and stat[1] not in ("Z", "X"):
            found.append((int(name), stat[0]))
    return found


def wait_gone(mark: str, timeout: float = 15.0, skip: tuple[int, ...] = ()) -> list[tuple[int, str]]:
    """What still carries ``mark`` after up to ``timeout`` seconds (empty: everything ended)."""
    until = time.monotonic() + timeout
    while True:
        left = carrying(mark, skip)
        if not left or time.monotonic() > until:
            return left
        time.sleep(0.1)


def started_before(pid: int, moment: float) -> bool:
    """Whether ``pid`` is a live process started no later than ``moment`` (time.time()): still the
    process a test learned of then, not a later one the kernel gave the same pid (pids wrap at
    /proc/sys/kernel/pid_max, 32768 here, and the suite starts tens of thousands of processes)."""
    fields = _stat(pid)
    if fields is None or fields[1] in ("Z", "X"):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            ticks = int(handle.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    started = time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    return started <= moment + 0.05  # the clock ticks of /proc/PID/stat are 10 ms


def kill_recorded(pid_file: Path, sig: int = signal.SIGKILL) -> None:
    """Teardown: ``sig`` to the process whose pid ``pid_file`` holds, if it is still that process
    (started before the file was written). A pid file outlives its process: once pids wrap, its
    number may belong to an unrelated process."""
    try:
        pid = int(pid_file.read_text())
        written = pid_file.stat().st_mtime
    except (OSError, ValueError):
        return
    if started_before(pid, written):
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def kill_marked(mark: str) -> None:
    """Teardown: SIGKILL every process carrying ``mark``, and its process group."""
    for pid, _ in carrying(mark):
        for kill, target in ((os.killpg, pid), (os.kill, pid)):
            with contextlib.suppress(OSError):
                if kill is os.killpg and os.getpgid(pid) != pid:
                    continue
                kill(target, signal.SIGKILL)


def state(pid: int) -> str:
    """The state letter of ``pid`` in /proc/PID/stat ('' when gone)."""
    stat = _stat(pid)
    return stat[1] if stat else ""


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its reaper counts as gone)."""
    return state(pid) not in ("", "Z", "X")


def gone_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` is gone (:func:`alive`) within ``seconds``."""
    end = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def tracer(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def wait_for(
    condition: Callable[[], object],
    timeout: float = 60.0,
    what: str = "",
    shown: Callable[[], object] | None = None,
) -> None:
    """Poll ``condition()`` until true; AssertionError naming ``what`` after ``timeout`` seconds,
    with ``shown()`` (what the test was looking at: a log) in the message."""
    until = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > until:
            detail = f"\n{shown()}" if shown is not None else ""
            raise AssertionError(f"timed out waiting for {what}{detail}")
        time.sleep(0.02)


@contextlib.contextmanager
def rankscope_marked(
    *args: str, drop: Callable[[str], bool] = lambda _name: False, **extra_env: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``rankscope ARGS`` in a session of its own with a fresh mark (stdout and stderr piped), the
    variables ``drop`` names removed; at the end everything carrying the mark and rankscope's
    group are SIGKILLed."""
    env, mark = marked_env(**extra_env)
    env = {name: value for name, value in env.items() if not drop(name)}
    rankscope = subprocess.Popen(
        [sys.executable, "-m", "rankscope", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield rankscope, mark
    finally:
        kill_marked(mark)
        if rankscope.poll() is None:
            os.killpg(rankscope.pid, signal.SIGKILL)
        rankscope.communicate()
