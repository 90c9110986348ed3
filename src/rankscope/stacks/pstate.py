"""The rule that keeps targets running, and the process state it decides on.

py-spy pauses a process while it reads it. If py-spy is killed at its deadline the kernel
detaches it, and a stop left pending could leave the target stopped. `ensure_running`
continues a process that is stopped now but was not before rankscope looked; a process
that was already stopped (someone sent SIGSTOP) is left alone.

The state comes from rankscope.procfs, the one module that reads /proc. Only os is
imported up front here (signal pulls in enum).
"""

from __future__ import annotations

import os

from rankscope import procfs

STOPPED = ("T", "t")


def proc_state(pid: int) -> tuple[str, int]:
    """(state letter from /proc/PID/stat, TracerPid); ('', 0) when the process is gone."""
    entry = procfs.process(pid)
    if entry is None:
        return "", 0
    return entry.state, procfs.tracer_pid(pid)


def ensure_running(pid: int, state_before: str) -> bool:
    """Continue a process rankscope left stopped. Returns True when it had to."""
    if state_before in STOPPED:
        return False
    entry = procfs.process(pid)
    # Stopped by a tracer that is still attached (py-spy mid-dump, a debugger): theirs to resume.
    if entry is not None and entry.state in STOPPED and procfs.tracer_pid(pid) == 0:
        import signal

        try:
            os.kill(pid, signal.SIGCONT)
            return True
        except OSError:
            return False
    return False
