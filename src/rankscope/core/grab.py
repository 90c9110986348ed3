"""`rankscope core grab`: cores of live (hung) processes, all at once, with a deadline.

gdb's ``gcore`` stops a process, writes its memory and lets it go on. The gcore script has gdb read
the symbols of every shared library first (``libtorch_cpu.so`` alone: 5-8 s of CPU while the process
stays stopped), which a core does not need: rankscope runs gdb itself with ``auto-solib-add off``
(:func:`gcore_argv`), the same core (the same segments and notes) in under a second of CPU. A torch
worker's core is 600-750 MB, so the processes are done in parallel and the disk is checked first: the free space of
the directory against the sum of the processes' mapped memory (VmSize). Measured on a hung torch
2.13 CPU process: VmSize 721 MB, VmRSS 225 MB, its gcore 688 MB (671 MB on disk: not sparse), so
resident memory would underestimate it threefold. ``abort`` instead sends SIGABRT: the process dies and the kernel writes the core where
kernel.core_pattern says (its own ulimit -c is raised to its hard limit first when it is 0).

Cores hold the process's memory (tokens, data, keys): each is created 0600 inside a private 0700
directory and moved into place only when whole (:func:`gcore_all`).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Optional

from rankscope import lifetime, procfs
from rankscope.errors import BadInputError, ExitCode, MissingToolError, NothingFoundError, RankscopeError
from rankscope.serial import OMIT_NONE

#: Room kept beyond the estimate (a core also holds notes and headers).
SPACE_MARGIN = 1.05


@dataclass
class Target:
    pid: int
    #: ``host:rank`` when the launcher's variables say, else the pid.
    label: str
    #: Mapped memory (VmSize, bytes): about what gcore writes.
    size: int = 0


@dataclass
class Grabbed:
    pid: int
    label: str
    #: The core file written (gcore), or where the kernel should put it (abort).
    path: Optional[str] = None
    size: int = 0
    elapsed: float = field(default=0.0, metadata={"round": 2})
    error: Optional[str] = field(default=None, metadata=OMIT_NONE)


@dataclass
class GrabReport:
    SCHEMA: ClassVar[str] = "rankscope.core.grab/1"

    directory: str
    method: str
    free: int
    needed: int
    results: list[Grabbed]

    @property
    def failed(self) -> list[Grabbed]:
        return [r for r in self.results if r.error]


def mapped_bytes(pid: int) -> int:
    value = procfs.status_field(pid, "VmSize")  # "123456 kB"
    try:
        return int((value or "0").split()[0]) * 1024
    except ValueError:
        return 0


def free_bytes(directory: str) -> int:
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


def needed_bytes(targets: Sequence[Target]) -> int:
    return int(sum(t.size for t in targets) * SPACE_MARGIN)


def targets_of(pids: Sequence[int], job: bool) -> list[Target]:
    """`--job`: every worker of the jobs on this node, labelled by rank; else the pids as named.

    Raises :class:`NothingFoundError` for ``--job`` without a job, :class:`BadInputError` for a pid
    that is not running."""
    from rankscope.procs import resolve_targets

    found = resolve_targets(pids, job, expand_launchers=False)
    if job and not found:
        raise NothingFoundError(
            "no distributed job on this node", "name the pids: rankscope core grab PID..."
        )
    missing = [t.pid for t in found if procfs.process(t.pid) is None]
    if missing:
        raise BadInputError(
            f"no such process: {' '.join(map(str, missing))}", "check the pids (ps, rankscope stacks)"
        )
    return [
        Target(
            t.pid,
            t.rank.label if t.rank is not None and t.rank.rank is not None else f"pid {t.pid}",
            mapped_bytes(t.pid),
        )
        for t in found
    ]


def make_room(directory: Path, targets: Sequence[Target], space_check: bool = True) -> tuple[int, int]:
    """Ready ``directory`` for gcore (created 0700 when missing; gcore must be installed) and check it
    has room for the cores; (free bytes, bytes needed)."""
    if shutil.which("gdb") is None:
        raise MissingToolError("gdb", "install gdb (apt-get install gdb): it writes the cores")
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise BadInputError(
            f"cannot create {directory}: {exc.strerror}", "pass --dir a directory of yours"
        ) from None
    free, needed = free_bytes(str(directory)), needed_bytes(targets)
    if free < needed and space_check:
        raise RankscopeError(
            f"{directory} has {free / 1e9:.1f} GB free, the cores need about {needed / 1e9:.1f} GB",
            "pass --dir a larger file system, fewer pids, or --no-space-check",
            ExitCode.BAD_INPUT,
        )
    return free, needed


def gcore_argv(gdb: str, pid: int, path: str) -> list[str]:
    """gdb writing the core of live process ``pid`` to ``path``, as gdb's gcore script does, but
    without reading any library's symbols (``auto-solib-add off``, ``--readnever``): the core holds
    the process's memory and threads whatever gdb knows of its symbols, and `core bt` reads those
    later. ``detach`` lets the process go on."""
    return [
        gdb,
        "--nx",
        "--batch",
        "--readnever",
        "-iex",
        "set debuginfod enabled off",
        "-iex",
        "set auto-solib-add off",
        "-ex",
        "set pagination off",
        "-ex",
        "set height 0",
        "-ex",
        "set width 0",
        "-ex",
        f"attach {pid}",
        "-ex",
        f"gcore {path}",
        "-ex",
        "detach",
        "-ex",
        "quit",
    ]


#: What gdb says after a command failed because an earlier one did (the attach): not the reason.
_FOLLOW_ON = ("You can't do that without a process to debug.", "The program is not being run.")


def _gdb_error(text: str) -> str:
    """The line of gdb's output that says why no core was written ("ptrace: Operation not permitted.",
    "Failed to open '...' for output."): its last line that is neither a [status] line nor a follow-on."""
    lines = [line.strip() for line in text.splitlines()]
    reasons = [line for line in lines if line and not line.startswith("[") and line not in _FOLLOW_ON]
    return reasons[-1] if reasons else ""


def _finish(child: lifetime.Child, result: Grabbed, work: str, directory: str) -> None:
    """One gcore ended: its core moved from the private ``work`` directory into ``directory``."""
    result.elapsed = child.elapsed
    partial = os.path.join(work, f"core.{result.pid}")
    if child.timed_out:
        result.error = f"gcore did not finish by the deadline ({child.elapsed:.0f} s)"
    elif not os.path.exists(partial):
        result.error = (
            f"gcore wrote no core: {_gdb_error(child.text()) or 'exit code ' + str(child.returncode)}"
        )
    if result.error:
        with contextlib.suppress(OSError):
            os.unlink(partial)  # a partial core is worse than none (it looks whole)
        return
    path = os.path.join(directory, f"core.{result.pid}")
    try:
        os.replace(partial, path)  # replaces a link planted there, never writes through it
    except OSError as exc:
        result.error = f"could not move the core to {path}: {exc.strerror or exc}"
        return
    result.path, result.size = path, os.path.getsize(path)


def gcore_all(
    targets: Sequence[Target],
    directory: str,
    timeout: float,
    parallel: int = 0,
    progress: Optional[Callable[[str], None]] = None,
) -> list[Grabbed]:
    """gcore of every target into ``directory/core.PID``, ``parallel`` at a time (0: all at once).

    Each core is written 0600 (gcore runs with umask 077) into a private 0700 directory inside
    ``directory`` and moved into place once whole: nobody else reads a byte of it, and a core that
    is in ``directory`` is complete. gcore and its gdb die with rankscope (:mod:`rankscope.lifetime`,
    SIGKILL included); a target is continued if it is left stopped; the private directory and any
    partial core are removed on the deadline, SIGTERM, Ctrl-C or rankscope's death.
    """
    gdb = shutil.which("gdb")
    results = [Grabbed(t.pid, t.label) for t in targets]
    deadline = time.monotonic() + timeout
    width = parallel or len(targets) or 1
    queue = list(zip(targets, results))
    with lifetime.private_tempdir(".rankscope-grab-", directory) as work:
        while queue:
            batch, queue = queue[:width], queue[width:]
            _batch(batch, gdb or "gdb", work, directory, deadline)
            if progress:
                progress(f"{sum(1 for r in results if r.path)} of {len(results)} cores written")
    return results


def _batch(
    batch: Sequence[tuple[Target, Grabbed]], gdb: str, work: str, directory: str, deadline: float
) -> None:
    running: list[tuple[lifetime.Child, Grabbed]] = []
    try:
        for target, result in batch:
            entry = procfs.process(target.pid)
            lifetime.note_target(target.pid, entry.state if entry is not None else "")
            try:
                child = lifetime.start(
                    gcore_argv(gdb, target.pid, os.path.join(work, f"core.{target.pid}")),
                    max(0.0, deadline - time.monotonic()),
                    umask=0o077,
                    capture=1 << 20,
                )
            except OSError as exc:
                result.error = f"gcore could not start: {exc.strerror or exc}"
                lifetime.release_target(target.pid)
                continue
            running.append((child, result))
        lifetime.wait([child for child, _ in running])
    finally:  # also on SIGTERM or Ctrl-C: what finished is kept, what runs is ended and removed
        for child, result in running:
            if child.returncode is None:
                child.end()
                child.timed_out = True
            _finish(child, result, work, directory)
            lifetime.release_target(result.pid)


def _raise_core_limit(pid: int) -> None:
    with contextlib.suppress(OSError, ValueError):
        soft, hard = resource.prlimit(pid, resource.RLIMIT_CORE)
        if soft != hard:
            resource.prlimit(pid, resource.RLIMIT_CORE, (hard, hard))


def abort_all(targets: Sequence[Target], timeout: float, where: str) -> list[Grabbed]:
    """SIGABRT to every target (ulimit -c raised to its hard limit first); waits for them to die."""
    results = []
    for target in targets:
        result = Grabbed(target.pid, target.label, path=where)
        _raise_core_limit(target.pid)
        try:
            os.kill(target.pid, signal.SIGABRT)
        except ProcessLookupError:
            result.error = "no such process"
        except PermissionError:
            result.error = "not allowed to signal it (another user's process)"
        results.append(result)
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    pending = [r for r in results if not r.error]
    while pending and time.monotonic() < deadline:
        pending = [r for r in pending if procfs.process(r.pid) is not None and _alive(r.pid)]
        time.sleep(0.05)
    for result in results:
        result.elapsed = time.monotonic() - started
        if result in pending:
            result.error = "still running after SIGABRT (it handles or blocks the signal)"
    return results


def _alive(pid: int) -> bool:
    state = procfs.status_field(pid, "State") or ""
    return not state.startswith(("Z", "X"))
