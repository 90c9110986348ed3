"""`rankscope core grab`: cores of live (hung) processes, all at once, with a deadline.

gcore (gdb's) stops a process, writes its memory and lets it go on; a torch worker takes 5-8 s and
600-750 MB, so the processes are done in parallel and the disk is checked first: the free space of
the directory against the sum of the processes' mapped memory (VmSize). Measured on a hung torch
2.13 CPU process: VmSize 721 MB, VmRSS 225 MB, its gcore 688 MB (671 MB on disk: not sparse), so
resident memory would underestimate it threefold. ``abort`` instead sends SIGABRT: the process dies and the kernel writes the core where
kernel.core_pattern says (its own ulimit -c is raised to its hard limit first when it is 0).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable, Optional

from rankscope import lifetime, procfs
from rankscope.serial import OMIT_NONE

SCHEMA = "rankscope.core.grab/1"
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


def _collect(
    running: dict[int, tuple[subprocess.Popen[bytes], Grabbed, float]], deadline: float, directory: str
) -> None:
    while running:
        for pid, (process, result, started) in list(running.items()):
            if process.poll() is None and time.monotonic() < deadline:
                continue
            if process.returncode is None:
                lifetime.end_group(process)
                result.error = f"gcore did not finish by the deadline ({deadline - started:.0f} s)"
            elapsed = time.monotonic() - started
            out = process.stdout.read().decode("utf-8", "replace") if process.stdout else ""
            path = os.path.join(directory, f"core.{pid}")
            result.elapsed = elapsed
            if os.path.exists(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o600)  # memory of the process: private
                if result.error:
                    os.unlink(path)  # a partial core is worse than none (it looks whole)
                else:
                    result.path, result.size = path, os.path.getsize(path)
            elif not result.error:
                last = [line for line in out.splitlines() if line.strip()]
                result.error = (
                    f"gcore wrote no core: {last[-1] if last else 'exit code ' + str(process.returncode)}"
                )
            del running[pid]
        time.sleep(0.05)


def gcore_all(
    targets: Sequence[Target],
    directory: str,
    timeout: float,
    parallel: int = 0,
    progress: Optional[Callable[[str], None]] = None,
) -> list[Grabbed]:
    """gcore of every target into ``directory/core.PID``, ``parallel`` at a time (0: all at once)."""
    gcore = shutil.which("gcore")
    results = [Grabbed(t.pid, t.label) for t in targets]
    deadline = time.monotonic() + timeout
    width = parallel or len(targets) or 1
    queue = list(zip(targets, results))
    running: dict[int, tuple[subprocess.Popen[bytes], Grabbed, float]] = {}
    while queue:
        batch, queue = queue[:width], queue[width:]
        for target, result in batch:
            try:
                process, _token = lifetime.start_group(
                    [gcore or "gcore", "-o", os.path.join(directory, "core"), str(target.pid)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            except OSError as exc:
                result.error = f"gcore could not start: {exc.strerror or exc}"
                continue
            running[target.pid] = (process, result, time.monotonic())
        _collect(running, deadline, directory)
        if progress:
            progress(f"{sum(1 for r in results if r.path)} of {len(results)} cores written")
    return results


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
