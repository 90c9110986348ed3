"""The guardian: a small process that ends what rankscope started when rankscope dies, SIGKILL included.

Started once per rankscope process, on its first child (:func:`rankscope.lifetime.guardian`), as
``python -I -S`` in a session of its own with stdin the read end of a pipe whose only write end
rankscope holds. It reads notes from that pipe (a target rankscope holds, a temporary path) and
waits. At end of file (rankscope exited, normally or not, because the kernel closes the write end
of a dead process) it:

1. finds every process that carries rankscope's run id in ``RANKSCOPE_STARTED_BY`` (each child
   gets it in its environment and hands it on to its own children, torchrun workers in their own
   sessions and orphans under pid 1 included) and sends SIGTERM to it, and to its process group
   when it leads one (gdb and strace detach on SIGTERM);
2. waits up to the grace for them to end, then SIGKILLs what is left, scanning again until a scan
   finds none (what forked meanwhile is caught by the next scan);
3. sends SIGCONT to every noted target that is stopped now but was not when noted;
4. removes every noted path that is still there (private temporary directories, partial cores).

It imports only os, signal, sys and time (shutil when a path is left), and never rankscope: it
runs outside the package's import path. Its own stdout and stderr are /dev/null, so a caller
reading rankscope's output sees end of file when rankscope exits, not when the guardian does.

Notes, one per line: ``T PID STATE`` (a target and its state letter before), ``t PID`` (done
with it), ``P HEX`` (a path, its bytes in hex), ``p HEX`` (kept or removed by rankscope itself).
"""

from __future__ import annotations

import os
import signal
import sys
import time

TYPE_CHECKING = False  # typing takes longer to import than the guardian's own start
if TYPE_CHECKING:
    from typing import Callable

#: The variable every child of rankscope carries: ``<run id>:<serial>``.
STARTED_BY = "RANKSCOPE_STARTED_BY"


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) of ``pid``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[2])


def _started_by(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    key = STARTED_BY.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(key):
            return item[len(key) :].decode("utf-8", "replace")
    return None


def _matches(value: str, wanted: str) -> bool:
    return value.startswith(wanted) if wanted.endswith(":") else value == wanted


def carriers(wanted: str) -> list[tuple[int, int]]:
    """(pid, process group) of every live process whose ``STARTED_BY`` is ``wanted``: one child's
    token, or with a run id and ``:`` every child of that run (and what each started).

    Zombies are left out: they hold nothing but a pid (their parent reaps them, or pid 1).
    """
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        value = _started_by(pid)
        if value is None or not _matches(value, wanted):
            continue
        stat = _stat(pid)
        if stat is not None and stat[0] not in ("Z", "X"):
            found.append((pid, stat[1]))
    return found


def signal_carriers(wanted: str, sig: int) -> int:
    """``sig`` to every carrier of ``wanted`` and to each group one of them leads; how many were found."""
    found = carriers(wanted)
    for pid, pgid in found:
        if pgid == pid:  # a group is ours only when its leader is
            _send(os.killpg, pgid, sig)
        _send(os.kill, pid, sig)
    return len(found)


def _send(kill: Callable[[int, int], None], target: int, sig: int) -> None:
    try:
        kill(target, sig)
    except OSError:  # gone, or no longer ours
        return


def end_carriers(wanted: str, grace: float) -> None:
    """SIGTERM to every carrier of ``wanted``, SIGKILL after ``grace`` to what is left, until none is."""
    if not signal_carriers(wanted, signal.SIGTERM):
        return
    until = time.monotonic() + grace
    while time.monotonic() < until and carriers(wanted):
        time.sleep(0.02)
    for _ in range(50):
        if not signal_carriers(wanted, signal.SIGKILL):
            return
        time.sleep(0.02)


def _traced(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"TracerPid:"):
                    return int(line.split()[1]) != 0
    except (OSError, ValueError, IndexError):
        pass
    return False


def continue_if_stopped(pid: int, state_before: str) -> bool:
    """SIGCONT to ``pid`` when it is stopped now but was not before, and no tracer holds it (a
    debugger someone attached resumes it itself); True when sent."""
    stat = _stat(pid)
    if stat is None or state_before in ("T", "t") or stat[0] not in ("T", "t") or _traced(pid):
        return False
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        return False
    return True


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            import shutil

            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def _read_notes(targets: dict[int, str], paths: set[str]) -> None:
    pending = b""
    while True:
        try:
            chunk = os.read(0, 65536)
        except InterruptedError:
            continue
        except OSError:
            return
        if not chunk:
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                _note(line.decode("ascii", "replace"), targets, paths)
            except ValueError:  # not a note rankscope writes: skipped, the others still count
                continue


def _note(line: str, targets: dict[int, str], paths: set[str]) -> None:
    kind, _, rest = line.partition(" ")
    if kind == "T":
        pid, _, state = rest.partition(" ")
        targets[int(pid)] = state
    elif kind == "t":
        targets.pop(int(rest), None)
    elif kind == "P":
        paths.add(os.fsdecode(bytes.fromhex(rest)))
    elif kind == "p":
        paths.discard(os.fsdecode(bytes.fromhex(rest)))


def main(argv: list[str]) -> None:
    run_id, grace = argv[0], float(argv[1])
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    targets: dict[int, str] = {}
    paths: set[str] = set()
    _read_notes(targets, paths)
    end_carriers(run_id + ":", grace)
    for pid, state in targets.items():
        continue_if_stopped(pid, state)
    for path in paths:
        _remove(path)


if __name__ == "__main__":  # run from rankscope.lifetime (its bootstrap sets sys.argv)
    main(sys.argv[1:])
