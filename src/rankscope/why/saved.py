"""`why --from DIR`: the signals a `why --out` bundle, a `stacks --out` directory or a capture kept,
read back and weighed again (the same analysis as a live run).

What is read, where present: ``stacks.json`` with ``raw/`` (at the top or under ``stacks/``, through
`stacks --from`'s reader), ``fr.json`` (a `rankscope.fr` document) or flight-recorder dumps under
``fr/``, the job's output under ``logs/`` (and ``*.log`` files at the top), ``kernel.txt`` (a
bundle's: the messages its why.json kept, those since the job started),
the ranks' ``*.crash``/``*.term`` dumps (at the top or under ``runtime/``), torchelastic error
files (``errors/*.json``, ``*error*.json``), trace rings under ``trace/``, cores under ``cores/``,
and the ended ranks and pid -> rank map of ``why.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rankscope.errors import BadInputError
from rankscope.why.files import error_file, rank_file, read_cores, read_fr, read_traces
from rankscope.why.kernel import parse_kernel
from rankscope.why.output import read_logs
from rankscope.why.report import ABSENT, READ
from rankscope.why.signals import Gathered

if TYPE_CHECKING:
    from rankscope.why.report import WhyReport

#: The most of a kept file read.
MAX = 64 << 20


def _text(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        return f.read(MAX).decode("utf-8", "replace")


def read_from(directory: Path) -> Gathered:
    """Every signal kept in ``directory``; BadInputError when it is not a directory or holds none."""
    if not directory.is_dir():
        raise BadInputError(f"{directory}: not a directory", "name a `why --out` or `stacks --out` directory")
    gathered = Gathered()
    before = _previous(directory, gathered)
    stacks_dir = next((d for d in (directory / "stacks", directory) if (d / "stacks.json").is_file()), None)
    if stacks_dir is not None:
        from rankscope.stacks.analyse import diagnose
        from rankscope.stacks.saved import read_saved

        saved = read_saved(stacks_dir)
        report = saved.report
        report.diagnosis = report.diagnosis or diagnose(report)
        gathered.stacks = report
        gathered.hosts = list(report.hosts)
        for process in report.processes:
            if process.rank.rank is not None:
                gathered.pid_rank.setdefault(process.pid, process.rank.rank)
        dumped = sum(1 for p in report.processes if p.dumped)
        gathered.signal(
            "stacks", READ, f"{stacks_dir}/: {dumped} of {len(report.processes)} processes dumped"
        )
        if saved.fr is not None:
            from rankscope.fr.report import load_report as load_fr

            with contextlib.suppress(ValueError):
                gathered.fr = load_fr(saved.fr)
    else:
        gathered.signal("stacks", ABSENT, "no stacks.json kept")
    if (directory / "fr.json").is_file():
        from rankscope.fr.report import load_report as load_fr

        try:
            gathered.fr = load_fr(json.loads(_text(directory / "fr.json")))
            gathered.signal("flight recorders", READ, f"{directory}/fr.json: {gathered.fr.headline}")
        except ValueError as err:
            gathered.notes.append(f"{directory}/fr.json not read: {err}")
    elif (directory / "fr").is_dir():
        read_fr(str(directory / "fr"), gathered)
    elif gathered.fr is None:
        gathered.signal("flight recorders", ABSENT, "none kept")
    logs = sorted(str(p) for p in directory.glob("*.log") if p.is_file())
    if (directory / "logs").is_dir():
        logs.append(str(directory / "logs"))
    if logs:
        read_logs(logs, gathered)
    else:
        gathered.signal("job output", ABSENT, "none kept")
    kernel = next((directory / n for n in ("kernel.txt", "dmesg.txt") if (directory / n).is_file()), None)
    if kernel is not None:
        lines = _text(kernel).splitlines()
        # a bundle's why.json holds the messages since the job started (the live pass's): the older
        # ones of kernel.txt may name a pid a rank has now (pids are reused)
        gathered.kernel.extend(before.kernel if before is not None else parse_kernel(lines))
        gathered.signal("kernel messages", READ, f"{kernel}: {len(lines)} lines")
    else:
        gathered.signal("kernel messages", ABSENT, "none kept")
    found = 0
    for place in (directory, directory / "runtime"):
        for path in sorted(place.glob("*.crash")) + sorted(place.glob("*.term")):
            item = rank_file(str(path), _text(path))
            if item is not None:
                gathered.rank_files.append(item)
                found += 1
                if item.pid is not None and item.rank is not None:
                    gathered.pid_rank.setdefault(item.pid, item.rank)
    gathered.signal("crash and SIGTERM dumps", READ if found else ABSENT, f"{found} kept")
    errors = 0
    for path in sorted(directory.glob("errors/*.json")) + sorted(directory.glob("*error*.json")):
        item = error_file(str(path))
        if item is None:
            continue
        named = re.match(r"rank-(\d+)\.pid-(\d+)\.", path.name)
        if named is not None:
            item.rank, item.pid = int(named.group(1)), int(named.group(2))
        gathered.rank_files.append(item)
        errors += 1
    gathered.signal("torchelastic error files", READ if errors else ABSENT, f"{errors} kept")
    if (directory / "trace").is_dir():
        read_traces(str(directory / "trace"), gathered)
    if (directory / "cores").is_dir():
        read_cores(str(directory / "cores"), gathered)
    if not any(s.state == READ for s in gathered.signals) and before is None:
        raise BadInputError(
            f"{directory}: no signal kept there (no stacks.json, fr.json, logs, kernel.txt, crash dumps or cores)",
            "name a directory `rankscope why --out` or `rankscope stacks --out` wrote",
        )
    return gathered


def _previous(directory: Path, gathered: Gathered) -> Optional[WhyReport]:
    """The ended ranks, pid -> rank map and GPUs a `why --out` bundle's why.json kept; its report
    (None without one)."""
    path = directory / "why.json"
    if not path.is_file():
        return None
    from rankscope.why.report import load_report

    try:
        before = load_report(json.loads(_text(path)))
    except ValueError as err:
        gathered.notes.append(f"{path} not read: {err}")
        return None
    gathered.dead.extend(before.dead)
    gathered.gpus.extend(before.gpus)
    gathered.hosts = list(before.hosts)
    for dead in before.dead:
        if dead.rank is not None:
            gathered.pid_rank.setdefault(dead.pid, dead.rank)
    if before.dead:
        gathered.signal("ended ranks", READ, f"{path}: {len(before.dead)}")
    return before
