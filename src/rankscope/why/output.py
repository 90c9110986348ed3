"""The job's own output for `rankscope why` (I/O): found without asking (the launcher's and ranks'
stdout/stderr when they are regular files, never a pipe or a terminal, and the files that the
``tee`` reading such a pipe writes, as ``| tee train.log``; torchrun ``--log-dir``;
SLURM's StdOut/StdErr), read by `logs errors` within the pass's deadline (the scheduler's words among
its findings: rankscope.logs.scheduler)."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional, cast

from rankscope import procfs
from rankscope.folding import RankSet
from rankscope.why.report import FAILED, READ
from rankscope.why.signals import Gathered

if TYPE_CHECKING:
    from rankscope.logs.sources import LogSource
    from rankscope.stacks.collect import Stop


def _left(deadline: float) -> float:
    return max(0.1, deadline - time.monotonic())


_LOG_DIR = re.compile(r"^--log[-_]dir(?:=(.*))?$")


def output_files(pids: Iterable[int]) -> list[str]:
    """stdout/stderr of these processes that are regular files (never a pipe or a terminal: reading
    one would take the job's own output), each file once."""
    seen: set[tuple[int, int]] = set()
    out = []
    for pid in pids:
        for fd in (1, 2):
            found = procfs.fd_file(pid, fd)
            if found is None or (found[1].st_dev, found[1].st_ino) in seen:
                continue
            target, st = found
            seen.add((st.st_dev, st.st_ino))
            usable = os.path.isabs(target) and not target.endswith(" (deleted)")
            out.append(target if usable else f"/proc/{pid}/fd/{fd}")
    return out


def _pipe(pid: int, fd: int) -> Optional[str]:
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None
    return target if target.startswith("pipe:[") else None


def _written(pid: int, fd: int) -> bool:
    """Whether descriptor ``fd`` of ``pid`` was opened for writing (its ``flags:``, octal)."""
    flags = next((line.split()[1] for line in procfs.fdinfo(pid, fd) if line.startswith("flags:")), None)
    return flags is not None and int(flags, 8) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)


def piped_files(pids: Iterable[int]) -> list[str]:
    """The files a job's output is copied to through a pipe (``python train.py 2>&1 | tee train.log``):
    the regular files opened for writing by the ``tee`` that reads (on its stdin) a pipe these
    processes' stdout or stderr write to. The pipe itself is never read; nor are the files of another
    reader (a supervisor or a notebook holds files of its own open)."""
    mine = set(pids)
    pipes = {pipe for pid in mine for fd in (1, 2) if (pipe := _pipe(pid, fd)) is not None}
    if not pipes:
        return []
    out = []
    for reader, entry in procfs.table().items():
        if reader in mine or entry.comm != "tee" or _pipe(reader, 0) not in pipes:
            continue
        try:
            links = procfs.fd_links(reader)
        except OSError:
            continue
        for fd, target in links:
            found = procfs.fd_file(reader, fd) if fd > 2 or fd == 1 else None
            if (
                found is not None
                and os.path.isabs(target)
                and not target.startswith("/dev/")
                and _written(reader, fd)
            ):
                out.append(target)
    return list(dict.fromkeys(out))


def torchrun_log_dir(cmdline: list[str], cwd: Optional[str]) -> Optional[str]:
    """torchrun's ``--log-dir DIR`` (``--log_dir``), relative to its working directory."""
    for index, word in enumerate(cmdline):
        match = _LOG_DIR.match(word)
        if match is None:
            continue
        value = (
            match.group(1)
            if match.group(1) is not None
            else (cmdline[index + 1] if index + 1 < len(cmdline) else None)
        )
        if value:
            return value if os.path.isabs(value) or cwd is None else os.path.join(cwd, value)
    return None


def slurm_output_paths(text: str) -> list[str]:
    """StdOut= and StdErr= of ``scontrol show job`` (each path once; ``StdIn=/dev/null`` is not output)."""
    return list(dict.fromkeys(re.findall(r"\bStd(?:Out|Err)=(\S+)", text)))


def slurm_outputs(job: str, deadline: float) -> tuple[list[str], str]:
    """StdOut/StdErr of a SLURM job (``scontrol show job``); and a note when they cannot be asked."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return [], "scontrol not found: SLURM's StdOut/StdErr not read"
    from rankscope import lifetime

    child = lifetime.run([scontrol, "show", "job", job], min(5.0, _left(deadline)))
    if child.timed_out or child.returncode != 0:
        return [], f"scontrol show job {job}: " + (child.text().strip()[:200] or "no answer")
    return [p for p in slurm_output_paths(child.text()) if os.path.isfile(p)], ""


class _Deadline:
    """What `logs`' reader asks between blocks (a StopSignals' ``signum`` and ``name``): set once the
    pass's deadline passed or a stop signal came, so the job's output is read as far as time allows."""

    def __init__(self, deadline: Optional[float], stop: Optional[Stop]) -> None:
        self.deadline = deadline
        self.stop = stop

    @property
    def signum(self) -> int:
        if self.stop is not None and self.stop.signum:
            return int(self.stop.signum)
        return 1 if self.deadline is not None and time.monotonic() > self.deadline else 0

    @property
    def name(self) -> str:
        return "the deadline (--timeout)"


def log_starts(values: Iterable[str]) -> dict[str, int]:
    """``--log-from FILE:BYTES`` as {real path: byte}; a value without ``:BYTES`` is refused (ValueError)."""
    starts: dict[str, int] = {}
    for value in values:
        path, sep, number = value.rpartition(":")
        if not sep or not path or not number.isdigit():
            raise ValueError(f"{value!r} is not FILE:BYTES")
        starts[os.path.realpath(path)] = int(number)
    return starts


#: How much of a file is read at a time to find torchrun's last restart in it.
_RESTART_WINDOW = 1 << 20


def restart_starts(
    paths: Iterable[str], deadline: Optional[float] = None, started: Optional[float] = None
) -> dict[str, int]:
    """For a job that still runs: the byte after torchrun's last restart in each output file that has
    one ({real path: byte}), the current attempt's first; the files' earlier bytes are an earlier
    attempt's output (rankscope.logs.restarts). ``started``: when the running workers started (seconds
    since the epoch): an agent's failed-attempt line written since is the running attempt's own (torchrun
    tearing it down), no restart. Within the deadline; a file that cannot be read is left out."""
    from rankscope.logs.restarts import attempt_ends

    starts: dict[str, int] = {}
    for path in paths:
        real = os.path.realpath(path)
        last, offset, carry = 0, 0, b""
        if not os.path.isfile(real):  # a directory's files, a pipe (whose open would wait for a writer)
            continue
        try:
            with open(real, "rb") as handle:
                while deadline is None or time.monotonic() < deadline:
                    block = handle.read(_RESTART_WINDOW)
                    if not block:
                        break
                    data = carry + block
                    cut = data.rfind(b"\n") + 1  # whole lines; the rest joins the next block
                    if not cut and len(data) > 4 * _RESTART_WINDOW:
                        cut = len(data)  # a line that never ends holds no restart line
                    ends = attempt_ends(data[:cut], started)
                    if ends:
                        last = offset + ends[-1]
                    offset += cut
                    carry = data[cut:]
        except OSError:
            continue
        if last:
            starts[real] = last
    return starts


def workers_started(pids: Iterable[int]) -> Optional[float]:
    """When the first of ``pids`` started, in seconds since the epoch; None where it cannot be read."""
    boot = procfs.boot_time()
    after = [a for a in (procfs.started_after_boot(pid) for pid in pids) if a is not None]
    return boot + min(after) if boot is not None and after else None


def _from_starts(sources: list[LogSource], starts: dict[str, int]) -> list[LogSource]:
    """Each source read from its ``--log-from`` byte (named so: its line numbers count from there)."""
    out = []
    for source in sources:
        start = starts.get(os.path.realpath(source.path)) if source.path is not None else None
        if start:
            source = replace(source, name=_from_words(source.name, starts), start=start)
        out.append(source)
    return out


def _written_since(sources: list[LogSource], since: Optional[float]) -> list[LogSource]:
    """The sources written since ``since`` (all without it; stdin always)."""
    if not since:
        return sources
    kept = []
    for source in sources:
        try:
            if source.path is not None and source.path.stat().st_mtime < since:
                continue
        except OSError:
            continue
        kept.append(source)
    return kept


def _from_words(path: str, starts: dict[str, int]) -> str:
    start = starts.get(os.path.realpath(path))
    return f"{path} (from byte {start})" if start else path


def read_logs(
    paths: list[str],
    gathered: Gathered,
    deadline: Optional[float] = None,
    stop: Optional[Stop] = None,
    starts: Optional[dict[str, int]] = None,
    since: Optional[float] = None,
) -> None:
    """The job's output through `logs errors`: its findings and the user frames of its tracebacks.
    ``starts``: real path -> the byte a file is read from (:func:`log_starts`); ``since``: files
    not written since then are left out (an earlier attempt's, such as a --log-dir's ``attempt_0``)."""
    from rankscope.errors import RankscopeError
    from rankscope.logs.collect import scan_errors
    from rankscope.logs.cuda import asserts_of, is_async_cuda_error
    from rankscope.logs.labels import label_text
    from rankscope.logs.reading import Reading
    from rankscope.logs.roles import user_frame
    from rankscope.logs.sources import discover

    try:
        sources = _from_starts(_written_since(discover(paths), since), starts or {})
        reading = Reading(sources, stop=cast(Any, _Deadline(deadline, stop)))
        report, counts = scan_errors(reading)
    except (RankscopeError, OSError) as err:
        gathered.signal("job output", FAILED, f"{', '.join(paths)}: {getattr(err, 'message', err)}")
        return
    gathered.logs.extend(paths)
    from rankscope.why.fatal import read_dumps

    gathered.fatal_dumps.extend(
        read_dumps((str(s.path), s.name, s.start) for s in sources if s.path is not None and not s.not_read)
    )
    for group in report.groups:
        tb = group.timed or group.example
        frame = user_frame(tb.frames)
        if frame is not None:
            gathered.log_places[(tb.source, tb.line_number)] = (
                f"{frame.function} ({os.path.basename(frame.filename)}:{frame.line})"
            )
        # torch's global ranks of the copies, else their labels where each is a plain number (one node's
        # log, as a lone traceback's label is read: rankscope.why.weigh._ranks_of)
        labels = [label_text(label) for label in group.labels]
        plain = all(label is not None and label.isdigit() for label in labels)
        ranks = (
            RankSet.parse(group.global_ranks)
            if group.global_ranks
            else RankSet.of(int(label) for label in labels if label)
            if plain
            else RankSet()
        )
        if len(ranks) > 1:
            gathered.log_group_ranks[(tb.source, tb.line_number)] = list(ranks)
    for key, reason in counts.nccl_reasons.items():
        gathered.log_reasons[key] = reason.evidence()
    for group in report.groups:  # the exceptions it was raised while handling (`raise X from Y`: Y)
        tb = group.timed or group.example
        earlier = [
            f"while handling: {text}" for text in dict.fromkeys(tb.chained) if text and text != tb.exception
        ][-3:]
        if earlier:
            gathered.log_reasons.setdefault((tb.source, tb.line_number), []).extend(earlier)
    # what the kernel asserted, beside the error CUDA reported later: the rank's own assertion lines, or
    # lines without a rank prefix (torchrun without --tee) when one error alone was reported asynchronously
    late = [g for g in report.groups if counts.device_asserts and is_async_cuda_error(g.timed or g.example)]
    for group in late:
        tb = group.timed or group.example
        labels = [label_text(label) for label in group.labels] + ([None] if len(late) == 1 else [])
        said = [a.text() for a in asserts_of(labels, counts.device_asserts)]
        gathered.log_reasons.setdefault((tb.source, tb.line_number), []).extend(said)
    # the user's frame as `function (file:line)`, so the finding says it wherever it is weighed (a head)
    gathered.log_findings.extend(
        replace(f, where=gathered.log_places[(f.source, f.line)])
        if (f.source, f.line) in gathered.log_places
        else f
        for f in counts.findings
    )
    shown = [_from_words(path, starts or {}) for path in paths]
    read = f"{len(paths)} file{'s' if len(paths) > 1 else ''} ({', '.join(shown)}): {counts.lines} lines"
    read += f", {counts.tracebacks} traceback{'s' if counts.tracebacks != 1 else ''}"
    gathered.signal("job output", READ, read)
    for skipped in reading.skipped:
        gathered.notes.append(f"job output: {skipped}")
    if reading.interrupted:
        gathered.notes.append(f"job output: read until {reading.interrupted}; the rest was not read")
