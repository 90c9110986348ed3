"""A process's scheduler state from /proc, and the rule that keeps targets running.

py-spy pauses a process while it reads it. If py-spy is killed at its deadline the kernel
detaches it, and a stop left pending could leave the target stopped. `ensure_running`
continues a process that is stopped now but was not before rankscope looked; a process
that was already stopped (someone sent SIGSTOP) is left alone.

Only os is imported up front (signal pulls in enum): rankscope.stacks.prefetch runs this
before the rest of rankscope has loaded.
"""

from __future__ import annotations

import os

STOPPED = ("T", "t")


def _stat(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read()


def proc_state(pid: int) -> tuple[str, int]:
    """(state letter from /proc/PID/stat, TracerPid); ('', 0) when the process is gone."""
    try:
        stat = _stat(pid)
        end = stat.rindex(b")")
        state = stat[end + 2 : end + 3].decode()
        tracer = 0
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("TracerPid:"):
                    tracer = int(line.split()[1])
                    break
        return state, tracer
    except (OSError, ValueError):
        return "", 0


def parent_pid(pid: int) -> int | None:
    try:
        stat = _stat(pid)
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def ensure_running(pid: int, state_before: str) -> bool:
    """Continue a process rankscope left stopped. Returns True when it had to."""
    if state_before in STOPPED:
        return False
    state, tracer = proc_state(pid)
    if state in STOPPED and tracer == 0:
        import signal

        try:
            os.kill(pid, signal.SIGCONT)
            return True
        except OSError:
            return False
    return False
