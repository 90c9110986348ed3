"""The ranks' progress markers (``rankscope.progress``), read for the stacks report: each target's
step, labels and the marker's age, when it records one."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Optional

from rankscope import procfs
from rankscope.inproc import runtime
from rankscope.procfs import ProcfsEntry
from rankscope.ranks import short_hostname
from rankscope.stacks.collect import Target

if TYPE_CHECKING:  # imported by read_steps: a run lists the runtime files before the report is imported
    from rankscope.stacks.report import StepInfo

#: A target's runtime directory, its uid, and its files there ({kind: path}).
RankFiles = tuple[str, int, dict[str, str]]


def runtime_files(
    targets: Sequence[Target], host: Optional[str] = None, procs: Optional[Mapping[int, ProcfsEntry]] = None
) -> dict[int, RankFiles]:
    """Each readable target's rankscope files (:mod:`rankscope.inproc.runtime`), one listing per
    directory; a target whose environment cannot be read, or whose directory is not private to its
    user, is absent. ``procs``: the process table discovery read (its environments are not read again)."""
    host = host or short_hostname()
    where: dict[int, tuple[str, int]] = {}
    for target in targets:
        entry = procs.get(target.pid) if procs is not None else None
        try:
            if entry is not None:
                uid, known = entry.uid, entry.variables(runtime.PLACE_VARIABLES)
                if known is None:
                    continue
                environ = known
            else:
                uid = procfs.uid(target.pid)
                environ = procfs.environ(target.pid)
        except (OSError, ValueError):
            continue
        if uid is not None:
            where[target.pid] = (runtime.runtime_dir(environ, uid), uid)
    found: dict[int, RankFiles] = {}
    for directory, uid in set(where.values()):
        try:
            runtime.check_private(os.lstat(directory), uid)  # not a link, the job user's own
        except OSError:
            continue
        pids = [pid for pid, place in where.items() if place == (directory, uid)]
        files = runtime.files_of_pids(directory, pids, host)
        for pid in pids:
            found[pid] = (directory, uid, files.get(pid, {}))
    return found


def read_steps(
    targets: Sequence[Target], host: Optional[str] = None, files: Optional[dict[int, RankFiles]] = None
) -> dict[int, StepInfo]:
    """Each target's progress marker, when it records one (no marker, or an unreadable one: absent).
    ``files``: :func:`runtime_files` of the targets, when the caller has it."""
    from rankscope.stacks.report import StepInfo

    if files is None:
        files = runtime_files(targets, host)
    now = time.time()
    steps: dict[int, StepInfo] = {}
    for target in targets:
        if target.pid not in files:
            continue
        _, uid, kinds = files[target.pid]
        path = kinds.get("progress")
        if path is None:
            continue
        from rankscope.inproc import progress as progress_file  # only where a rank keeps a marker

        try:
            record = progress_file.read(path, uid=uid)
        except (OSError, ValueError):
            continue
        if record.pid != target.pid or record.start_ticks != progress_file.start_ticks(target.pid):
            continue  # a file of an earlier process with the same pid
        if record.calls == 0:
            continue
        steps[target.pid] = StepInfo(
            step=record.step, labels=dict(record.labels), age=max(0.0, now - record.updated)
        )
    return steps
