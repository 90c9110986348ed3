"""The ranks' progress markers (``rankscope.progress``), read for the stacks report: each target's
step, labels and the marker's age, when it records one."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Optional

from rankscope import procfs
from rankscope.inproc import runtime
from rankscope.ranks import short_hostname
from rankscope.stacks.collect import Target
from rankscope.stacks.report import StepInfo


def read_steps(targets: Sequence[Target], host: Optional[str] = None) -> dict[int, StepInfo]:
    """Each target's progress marker, when it records one (no marker, or an unreadable one: absent)."""
    host = host or short_hostname()
    now = time.time()
    steps: dict[int, StepInfo] = {}
    listed: dict[str, list[str]] = {}
    for target in targets:
        try:
            environ = procfs.environ(target.pid)
            uid = procfs.uid(target.pid)
        except (OSError, ValueError):
            continue
        if uid is None:
            continue
        directory = runtime.runtime_dir(environ, uid)
        if directory not in listed:
            try:
                runtime.check_private(os.lstat(directory), uid)  # not a link, the job user's own
                listed[directory] = os.listdir(directory)
            except OSError:
                listed[directory] = []
        suffix = f".pid-{target.pid}.progress"
        name = next(
            (
                n
                for n in listed[directory]
                if n.endswith(suffix)  # cheap: most names are other processes' (a shared /tmp)
                and (parsed := runtime.parse_name(n)) is not None
                and parsed[2] == target.pid
                and parsed[0] == host
                and parsed[3] == "progress"
            ),
            None,
        )
        if name is None:
            continue
        from rankscope.inproc import progress as progress_file  # only where a rank keeps a marker

        try:
            record = progress_file.read(os.path.join(directory, name), uid=uid)
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
