"""Which terminal, if any, a rank stopped in pdb may talk to.

A launcher changes what a worker's streams are: torchrun starts each worker in a session of its
own (no controlling terminal, so ``/dev/tty`` does not open) but leaves it the launcher's stdin;
``--local-ranks-filter`` or ``--redirects`` send its stdout elsewhere while stdin is still the
user's terminal; a launcher started in the background (``torchrun ... &``) leaves the terminal to
the shell, and a worker reading from it would fight the shell for the user's keystrokes.

The rule: ``/dev/tty`` when it opens and this process's group is in the foreground; else the
terminal of fd 0, 1 or 2 when the closest ancestor that has that terminal as its controlling
terminal is in its foreground (the launcher was started in the foreground), or, when no ancestor
tells, when it is fd 0 (what a ForkedPdb snippet does). Reading and writing both go to the
terminal device itself, never through ``sys.stdout``: a log filter or redirection that hides
a rank's stdout cannot hide the prompt.

Imported inside training processes: Python 3.9, standard library only.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

#: How many ancestors to look at for the one that owns the terminal (worker, agent, shell).
_ANCESTORS = 6


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat split after the command name (whose parentheses may hold anything)."""
    from rankscope import procfs

    fields = procfs.stat_fields(pid)
    if fields is None:
        raise OSError(f"/proc/{pid}/stat cannot be read")
    return fields


def _owner_is_foreground(rdev: int) -> Optional[bool]:
    """Whether the closest ancestor whose controlling terminal is ``rdev`` is in its foreground.

    ``None`` when no ancestor has that terminal as its controlling terminal.
    Fields after the name: state, ppid, pgrp, session, tty_nr, tpgid.
    """
    pid = os.getpid()
    for _ in range(_ANCESTORS):
        try:
            fields = _stat_fields(pid)
        except (OSError, ValueError):
            return None
        ppid, pgrp, tty_nr, tpgid = int(fields[1]), int(fields[2]), int(fields[4]), int(fields[5])
        if tty_nr == rdev and tty_nr != 0:
            return tpgid == pgrp
        if ppid <= 1:
            return None
        pid = ppid
    return None


def _controlling_terminal() -> Optional[int]:
    """A descriptor on /dev/tty when this process has a controlling terminal and is in its foreground."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def open_terminal() -> Optional[int]:
    """A read-write descriptor on the user's terminal, or ``None`` when there is none to use."""
    fd = _controlling_terminal()
    if fd is not None:
        return fd
    for std in (0, 1, 2):
        try:
            if not os.isatty(std):
                continue
            rdev = os.fstat(std).st_rdev
            foreground = _owner_is_foreground(rdev)
            if foreground is False or (foreground is None and std != 0):
                continue
            return os.open(os.ttyname(std), os.O_RDWR | os.O_NOCTTY)
        except OSError:
            continue
    return None
