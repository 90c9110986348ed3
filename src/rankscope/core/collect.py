"""The outside world of `rankscope core bt`: gdb and pystack on a core file, each with a deadline.

gdb gives the native backtrace of every thread (one batch run: ``bt`` of the thread that got the
signal, then ``thread apply all bt``); pystack gives the Python frames (with the native ones and
the library of each). py-spy cannot read cores written by gcore, pystack reads both kinds. Both run
at the same time through rankscope.lifetime: a session of their own, output kept up to its bound,
ended (with what they started) at the deadline, on SIGTERM or Ctrl-C, and when rankscope dies.

A path given is opened without blocking and must be a regular file (core.notes): a FIFO or a
device is one line in the list of unreadable files, never a hang.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional

from rankscope import lifetime
from rankscope.core.backtrace import (
    ALL_MARK,
    CURRENT_MARK,
    NO_PYSTACK,
    BadCore,
    BtReport,
    CoreBacktrace,
    analyse,
    group,
)
from rankscope.core.notes import NotACoreError, read_notes
from rankscope.errors import MissingToolError


@dataclass
class ToolRun:
    """One tool's run on one core: its output, or why there is none."""

    tool: str
    argv: list[str]
    output: str = ""
    returncode: Optional[int] = None
    elapsed: float = 0.0
    #: Why it gave nothing usable ("" when it ran): not installed, timed out, failed.
    error: str = ""


def gdb_argv(gdb: str, executable: str, core: str) -> list[str]:
    return [
        gdb,
        "-batch",
        "-nx",
        "-q",
        "-ex",
        "set pagination off",
        "-ex",
        "set width 0",
        "-ex",
        f"echo {CURRENT_MARK}\\n",
        "-ex",
        "bt",
        "-ex",
        f"echo {ALL_MARK}\\n",
        "-ex",
        "thread apply all bt",
        executable,
        core,
    ]


def find_pystack() -> Optional[str]:
    """pystack on PATH, or beside the interpreter running rankscope (a venv that was not activated)."""
    return lifetime.tool_path("pystack")


def pystack_argv(pystack: str, executable: Optional[str], core: str) -> list[str]:
    return [pystack, "core", "--native", "--no-color", core, *([executable] if executable else [])]


def _start(tool: str, argv: list[str], timeout: float) -> tuple[Optional[lifetime.Child], ToolRun]:
    run = ToolRun(tool, argv)
    try:
        child = lifetime.start(argv, timeout)
    except OSError as exc:
        run.error = f"{tool} could not start: {exc.strerror or exc}"
        return None, run
    return child, run


def _finish(child: Optional[lifetime.Child], run: ToolRun) -> ToolRun:
    if child is None:
        return run
    if child.timed_out:
        run.error = f"{run.tool} did not finish within {child.elapsed:.0f} s (raise --timeout)"
    run.output = child.text()
    run.returncode = child.returncode
    run.elapsed = child.elapsed
    if not run.error and child.returncode != 0 and run.tool == "pystack":
        last = [line for line in run.output.splitlines() if line.strip()]
        run.error = f"pystack failed: {last[-1] if last else 'exit code ' + str(child.returncode)}"
    return run


def run_tools(
    gdb: str, pystack: Optional[str], executable: str, core: str, timeout: float
) -> tuple[ToolRun, Optional[ToolRun]]:
    """gdb (and pystack when given) on ``core`` at the same time; each ends by ``timeout`` seconds."""
    gdb_child, gdb_run = _start("gdb", gdb_argv(gdb, executable, core), timeout)
    py_child, py_run = (None, None)
    if pystack:
        py_child, py_run = _start("pystack", pystack_argv(pystack, executable, core), timeout)
    children = [c for c in (gdb_child, py_child) if c is not None]
    try:
        lifetime.wait(children)
    finally:
        for child in children:
            child.__exit__()
    gdb_run = _finish(gdb_child, gdb_run)
    if py_run is not None:
        py_run = _finish(py_child, py_run)
    return gdb_run, py_run


def choose_executable(recorded: Optional[str], python: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """The executable gdb reads the core with, and a warning when it may not be the right one."""
    if python:
        if recorded and os.path.realpath(python) != os.path.realpath(recorded):
            return python, (
                f"the core was written by {recorded}; gdb reads it with {python} (--python): "
                "native frames are wrong unless it is the same build"
            )
        return python, None
    if recorded is None:
        return None, "the core does not record its executable: pass --python PATH (the job's interpreter)"
    if not os.path.exists(recorded):
        return (
            None,
            f"{recorded}, recorded in the core, is not on this machine: pass --python PATH (the same build)",
        )
    return recorded, None


def backtrace_core(
    path: str, python: Optional[str], gdb: str, pystack: Optional[str], timeout: float
) -> CoreBacktrace:
    """One core: its notes (NotACoreError when it is not one), then gdb and pystack on it."""
    notes = read_notes(path)
    executable, warning = choose_executable(notes.executable, python)
    problems = []
    if notes.truncated:
        problems.append(
            f"the core is truncated ({notes.size} bytes, less than its headers say; ulimit -c too low or the disk "
            "full): memory it lacks shows as ?? frames"
        )
    if executable is None:
        return analyse(notes, "", "", "", [*problems, "gdb not run: no executable"], warning)
    gdb_run, py_run = run_tools(gdb, pystack, executable, path, timeout)
    if gdb_run.error:
        problems.append(gdb_run.error)
    if pystack is None:
        problems.append(NO_PYSTACK)
    elif py_run is not None and py_run.error:
        problems.append(py_run.error)
    pystack_text = py_run.output if py_run is not None else ""
    return analyse(notes, executable, gdb_run.output, pystack_text, problems, warning)


def backtraces(
    paths: Sequence[str],
    python: Optional[str],
    host: str,
    timeout: float = 60.0,
    jobs: int = 0,
    progress: Optional[Callable[[str], None]] = None,
) -> BtReport:
    """`core bt` of every path: cores read in parallel, grouped by crash; unreadable files listed."""
    gdb = shutil.which("gdb")
    if gdb is None:
        raise MissingToolError("gdb", "install gdb (apt-get install gdb, dnf install gdb) to read core files")
    pystack = find_pystack()
    cores: list[CoreBacktrace] = []
    bad: list[BadCore] = []

    def one(path: str) -> Optional[CoreBacktrace]:
        try:
            return backtrace_core(path, python, gdb, pystack, timeout)
        except NotACoreError as exc:
            bad.append(BadCore(path, str(exc)))
        except OSError as exc:
            bad.append(BadCore(path, exc.strerror or str(exc)))
        finally:
            if progress:
                progress(f"read {path}")
        return None

    with ThreadPoolExecutor(max_workers=jobs or min(len(paths), os.cpu_count() or 1) or 1) as pool:
        try:
            for result in pool.map(one, paths):
                if result is not None:
                    cores.append(result)
        except (
            BaseException
        ):  # SIGTERM or Ctrl-C: the workers' gdb and pystack end now, not at their deadline
            pool.shutdown(wait=False, cancel_futures=True)
            lifetime.end_all()
            raise
    bad.sort(key=lambda b: list(paths).index(b.path))
    return BtReport(group(cores, host), bad, cores)
