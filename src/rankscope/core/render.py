"""`core bt` as text: the summary first (signal, crashing thread, top frames, libraries, meaning), then
the cores that could not be read. The full gdb/pystack text goes to --out files, not the terminal."""

from __future__ import annotations

import time

from rankscope.core.backtrace import NO_PYSTACK, BtReport, CoreBacktrace, CrashGroup
from rankscope.core.grab import GrabReport
from rankscope.core.listing import CoreList
from rankscope.model import Frame

#: How many frames of each kind the summary shows.
TOP_FRAMES = 8


def _native(frame: Frame) -> str:
    where = frame.filename.rsplit("/", 1)[-1]
    if frame.line:
        where += f":{frame.line}"
    library = (frame.library or "").rsplit("/", 1)[-1]
    if library and library != where:
        where = f"{where} ({library})" if where else library
    return f"{frame.function}  {where}".rstrip()


def _python(frame: Frame) -> str:
    return f"{frame.function}  {frame.filename}:{frame.line}"


def render_core(core: CoreBacktrace, indent: str = "  ") -> list[str]:
    notes = core.notes
    lines = []
    written = _when(notes.mtime)
    what = (
        f"a live process (gcore), pid {notes.pid}"
        if notes.written_by_gcore
        else f"{notes.signal_name} in thread {notes.crashing_thread} of pid {notes.pid}"
    )
    lines.append(f"{indent}{what} ({notes.program}; {core.thread_count} threads; written {written})")
    if notes.args:
        lines.append(f"{indent}command: {notes.args}")
    if core.executable_warning:
        lines.append(f"{indent}warning: {core.executable_warning}")
    if core.explanation:
        lines.append(f"{indent}meaning: {core.explanation}")
    lines.extend(f"{indent}note: {problem}" for problem in core.problems if problem == NO_PYSTACK)
    if core.libraries:
        lines.append(f"{indent}libraries on the crashing stack: {', '.join(core.libraries[:6])}")
    if core.native:
        lines.append(f"{indent}native frames (innermost first):")
        lines.extend(f"{indent}  {_native(frame)}" for frame in core.native[:TOP_FRAMES])
        if len(core.native) > TOP_FRAMES:
            lines.append(f"{indent}  ... {len(core.native) - TOP_FRAMES} more (--out keeps them all)")
    if core.python:
        lines.append(f"{indent}Python frames (innermost first):")
        lines.extend(f"{indent}  {_python(frame)}" for frame in core.python[:TOP_FRAMES])
    lines.extend(f"{indent}note: {problem}" for problem in core.problems if problem != NO_PYSTACK)
    return lines


def render_group(group: CrashGroup) -> list[str]:
    cores = len(group.paths)
    head = f"the same crash on {group.who} ({cores} cores)" if cores > 1 else f"{group.who}: {group.paths[0]}"
    lines = [head]
    if cores > 1:
        lines.append("  cores: " + " ".join(group.paths))
    return lines + render_core(group.example)


def render(report: BtReport) -> str:
    blocks = ["\n".join(render_group(group)) for group in report.groups]
    if report.bad:
        blocks.append("\n".join(f"not a readable core: {bad.path}: {bad.reason}" for bad in report.bad))
    return "\n\n".join(blocks)


def full_text(core: CoreBacktrace) -> str:
    """Everything about one core, for a bug report (--out): summary, then gdb's and pystack's output."""
    parts = ["\n".join(render_core(core, indent="")), "=== gdb ===", core.gdb_text]
    if core.pystack_text:
        parts += ["=== pystack core --native ===", core.pystack_text]
    return "\n\n".join(parts)


def _when(mtime: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime))


def render_list(found: CoreList) -> str:
    """`core list`: one line per core, newest first; or where nothing was found."""
    if not found.cores:
        return "no core files in " + ", ".join(found.places) + " (rankscope core check: will there be one?)"
    lines = []
    for one in found.cores:
        rank = f" rank {one.rank}" if one.rank is not None else ""
        what = (
            f"pid {one.pid}{rank} {one.signal} {one.executable}"
            if one.pid is not None
            else ("unreadable core" if one.source == "file" else one.source)
        )
        size = f"{one.size / 1e6:.0f} MB" if one.size >= 1e6 else f"{one.size} B"
        lines.append(
            f"{_when(one.mtime)}  {what}  {size}  {one.path}" + (f"  ({one.note})" if one.note else "")
        )
    return "\n".join(lines)


def render_grab(report: GrabReport) -> str:
    """`core grab`: each process's core (or SIGABRT, or why it failed)."""
    lines = []
    for result in report.results:
        who = result.label if result.label == f"pid {result.pid}" else f"{result.label} (pid {result.pid})"
        if result.error:
            lines.append(f"{who}: FAILED: {result.error}")
        elif report.method == "abort":
            lines.append(f"{who}: aborted (SIGABRT); {result.path}")
        else:
            lines.append(
                f"{result.label} (pid {result.pid}): {result.path} ({result.size / 1e6:.0f} MB, "
                f"{result.elapsed:.1f} s)"
            )
    return "\n".join(lines)
