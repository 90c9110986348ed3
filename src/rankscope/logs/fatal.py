"""faulthandler's dumps in a job's output (pure): a rank that died of a fatal signal with
``faulthandler.enable()`` (``PYTHONFAULTHANDLER=1``, ``python -X faulthandler``) wrote::

    Fatal Python error: Segmentation fault

    Current thread 0x00007f98f0e4bb80 (most recent call first):
      File "/job/train.py", line 9 in save_checkpoint
      ...

faulthandler writes to the file descriptor, past any Python wrapper, so the lines carry a
launcher's prefix at most (``torchrun --tee``), never torch's ``[rankN]:`` marker: a dump is the
rank's whose death its launcher reports with the same signal, when exactly one rank died of it
(:func:`fatal_findings`); the innermost user frame of the thread that got the signal is the place.
Read by ``logs errors`` as it scans and by ``why`` in the job's output files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Optional

from rankscope.evidence import CULPRIT, Finding, Kind
from rankscope.logs.prefixes import tee_local
from rankscope.logs.roles import user_frame
from rankscope.logs.tracebacks import FrameLine

NEEDLE = b"Fatal Python error: "
#: The lines of one dump read at most after its first line.
DUMP_LINES = 400
_HEADER = re.compile(r"^(?P<prefix>.*?)Fatal Python error: (?P<what>.+)$")
#: A thread's stack; ``Stack (most recent call first):`` where faulthandler dumps only the current one.
_THREAD = re.compile(
    r"^(?P<which>Current thread|Thread) 0x[0-9a-fA-F]+|^(?P<which_only>Stack) \(most recent call first\)"
)
_FRAME = re.compile(r'^  File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<function>.*)$')
#: faulthandler's words for each fatal signal, as the cause ids of the launchers' findings.
SIGNAL_CAUSES = {
    "Segmentation fault": "sigsegv",
    "Aborted": "sigabrt",
    "Bus error": "sigbus",
    "Floating point exception": "sigfpe",
    "Illegal instruction": "sigill",
}
_DUMP_LINE = re.compile(
    r'^(?:$|(?:Current thread|Thread) 0x|Stack \(most recent call first\):|  File "|  \.\.\.|  <no Python frame>|\.\.\.$)'
)
FATAL_STEP = (
    "the rank's faulthandler dump places the crash at {where}: native code called from there faulted "
    "(an extension, a custom kernel, a library torch calls); the rank's core file names the native "
    "frame (`rankscope core bt`)"
)


@dataclass(frozen=True)
class FatalDump:
    """One faulthandler dump found in an output."""

    source: str
    line: int
    #: ``Fatal Python error: Segmentation fault``.
    what: str
    #: The launchers' cause id of its signal (``sigsegv``), or None for another fatal error.
    cause: Optional[str]
    #: The innermost user frame of the thread that got the signal, ``function (file:line)``.
    location: Optional[str]
    #: The rank's label where the output names it (a torchrun --log-dir file, the header line's
    #: prefix), else None.
    who: Optional[str] = None
    #: What stands before ``Fatal Python error:`` on its line: a rank's prefix, or nothing.
    prefix: str = ""


def parse_dumps(text: str, source: str, first_line: int = 1, who: Optional[str] = None) -> list[FatalDump]:
    """Every faulthandler dump in ``text``, its lines numbered from ``first_line``; ``who``: the rank
    the whole text is from, where its source says so."""
    lines = text.splitlines()
    out = []
    for index, line in enumerate(lines):
        header = _HEADER.match(line)
        if header is None:
            continue
        prefix = header.group("prefix")
        frames: list[FrameLine] = []
        current: Optional[list[FrameLine]] = None
        for following in lines[index + 1 : index + 1 + DUMP_LINES]:
            if prefix and following.startswith(prefix):
                following = following[len(prefix) :]
            elif prefix and following == prefix.rstrip():  # a blank line under the prefix
                following = ""
            if not _DUMP_LINE.match(following):
                break
            thread = _THREAD.match(following)
            if thread is not None:
                frames = []
                if thread.group("which") != "Thread" or current is None:
                    current = frames  # the thread that got the signal; else the first one
                continue
            frame = _FRAME.match(following)
            if frame is not None:
                frames.append(
                    FrameLine(frame.group("file"), int(frame.group("line")), frame.group("function"))
                )
        what = header.group("what").strip()
        # most recent call first: the user's innermost frame is the first of them
        # no frame of the user's own (every one in a library: vLLM's, sglang's): the innermost one
        found = user_frame(reversed(current or [])) or (current[0] if current else None)
        place = f"{found.function} ({os.path.basename(found.filename)}:{found.line})" if found else None
        cause = SIGNAL_CAUSES.get(what)
        out.append(
            FatalDump(source, first_line + index, f"Fatal Python error: {what}", cause, place, who, prefix)
        )
    return out


def fatal_findings(dumps: Sequence[FatalDump], findings: Sequence[Finding]) -> list[Finding]:
    """A dump as its process's native crash: the rank its prefix or file names; else the rank whose
    death by that signal a launcher (or its exit status) reports, when exactly one rank died of it;
    else, where no line reports a death by that signal at all (Ray, sglang, a bare script), the
    crash of a process the log does not name. Two or more reported deaths leave it unplaced."""
    out = []
    for dump in dumps:
        if dump.cause is None:
            continue
        if dump.who is not None:  # its own file or prefix names the rank
            if tee_local(dump.prefix.encode("utf-8", "surrogateescape")):
                # torchrun --tee's "[default3]:": a local rank (its failure summary may give the global one)
                out.append(replace(_finding(dump, dump.who, None), local=True))
            else:
                out.append(_finding(dump, dump.who, int(dump.who) if dump.who.isdigit() else None))
            continue
        # the one process a launcher reports dead of that signal: its global rank where the launcher
        # names one (torchrun's summary, mpirun), else the local rank its line names
        reports = [
            f
            for f in findings
            if f.cause == dump.cause
            and f.kind in (Kind.LAUNCHER, Kind.KERNEL)
            and f.role == CULPRIT
            and f.who
        ]
        named = {(f.global_rank, f.who if f.global_rank is None else None) for f in reports}
        if not named:
            out.append(_finding(dump, None, None))  # nothing else reports it: the dump is the evidence
            continue
        if len(named) != 1:
            continue
        ((rank, local),) = named
        if rank is not None:
            out.append(_finding(dump, str(rank), rank))
            continue
        assert local is not None
        lines = [f for f in reports if f.who == local]
        out.append(replace(_finding(dump, local, None), local=all(f.local for f in lines)))
    return out


def _finding(dump: FatalDump, who: Optional[str], rank: Optional[int]) -> Finding:
    assert dump.cause is not None
    step = FATAL_STEP.format(where=dump.location) if dump.location else ""
    return Finding(Kind.NATIVE_CRASH, dump.cause, CULPRIT, who,
                   f"its faulthandler dump: {dump.what}", dump.location, dump.source, dump.line, dump.line, rank,
                   next_step=step)  # fmt: skip
