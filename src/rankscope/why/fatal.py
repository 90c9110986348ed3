"""faulthandler's dumps in the job's output (I/O to read, then pure): a rank that died of a fatal
signal with ``faulthandler.enable()`` (or ``python -X faulthandler``) wrote, on its stderr::

    Fatal Python error: Segmentation fault

    Current thread 0x00007f98f0e4bb80 (most recent call first):
      File "/job/train.py", line 9 in save_checkpoint
      ...

No rank prefix marks those lines (faulthandler writes to the file descriptor, past any Python
wrapper), so a dump is the rank's whose death its launcher reports with the same signal, when
exactly one rank died of it (:func:`fatal_findings`); its innermost user frame is the verdict's place.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional

from rankscope.evidence import CULPRIT, Finding, Kind

if TYPE_CHECKING:
    from rankscope.model import Frame

#: The end of each output file searched (the newest: a rank dies once).
TAIL_BYTES = 16 << 20
#: The lines of one dump read at most after its first line.
DUMP_LINES = 400
_HEADER = re.compile(r"^(?P<prefix>.*?)Fatal Python error: (?P<what>.+)$")
#: faulthandler's words for each fatal signal, as the cause ids of the launchers' findings.
SIGNAL_CAUSES = {
    "Segmentation fault": "sigsegv",
    "Aborted": "sigabrt",
    "Bus error": "sigbus",
    "Floating point exception": "sigfpe",
    "Illegal instruction": "sigill",
}
_DUMP_LINE = re.compile(r'^(?:$|(?:Current thread|Thread) 0x|  File "|  \.\.\.|  <no Python frame>|\.\.\.$)')


@dataclass(frozen=True)
class FatalDump:
    """One faulthandler dump found in an output file."""

    source: str
    line: int
    #: ``Fatal Python error: Segmentation fault``.
    what: str
    #: The launchers' cause id of its signal (``sigsegv``), or None for another fatal error.
    cause: Optional[str]
    #: The innermost user frame of the thread that got the signal, ``function (file:line)``.
    location: Optional[str]


def parse_dumps(text: str, source: str) -> list[FatalDump]:
    """Every faulthandler dump in ``text`` (its lines numbered from 1)."""
    from rankscope.stacks.frames import is_library
    from rankscope.stacks.inproc_text import parse_faulthandler

    lines = text.splitlines()
    out = []
    for index, line in enumerate(lines):
        header = _HEADER.match(line)
        if header is None:
            continue
        prefix = header.group("prefix")
        body = []
        for following in lines[index + 1 : index + 1 + DUMP_LINES]:
            if prefix and following.startswith(prefix):
                following = following[len(prefix) :]
            if not _DUMP_LINE.match(following):
                break
            body.append(following)
        try:
            threads = parse_faulthandler("\n".join(body), 0)
        except ValueError:
            threads = []
        # the thread that got the signal: "Current thread" (first unless all_threads wrote others)
        crashed = next((b for b in body if b.startswith("Current thread 0x")), None)
        ident = int(crashed.split()[2], 16) if crashed else None
        current = next((t for t in threads if t.frames and (ident is None or t.thread_id == ident)), None)
        what = header.group("what").strip()
        out.append(
            FatalDump(
                source,
                index + 1,
                f"Fatal Python error: {what}",
                SIGNAL_CAUSES.get(what),
                _user_place(current.frames if current is not None else (), is_library),
            )
        )
    return out


def _user_place(frames: Sequence[Frame], is_library: Callable[[Frame], bool]) -> Optional[str]:
    """The innermost frame of the user's code as ``function (file:line)``."""
    user = [f for f in frames if not is_library(f) and f.line]
    return f"{user[-1].function} ({user[-1].short_filename}:{user[-1].line})" if user else None


def read_dumps(paths: Iterable[tuple[str, str, int]]) -> list[FatalDump]:
    """The dumps in the end of each output file: (path, the name the report gives it, first byte).
    Lines are numbered when the file is read from its first byte; 0 when only its end is read."""
    out = []
    for path, name, start in paths:
        try:
            with open(path, "rb") as handle:
                offset = max(start, os.fstat(handle.fileno()).st_size - TAIL_BYTES)
                handle.seek(offset)
                data = handle.read(TAIL_BYTES)
        except OSError:
            continue
        if b"Fatal Python error: " not in data:
            continue
        if offset > start:  # the end of the file only: its first line may be cut
            data = data[data.find(b"\n") + 1 :]
        for dump in parse_dumps(data.decode("utf-8", "replace"), name):
            out.append(dump if offset <= start else replace(dump, line=0))
    return out


def fatal_findings(dumps: Sequence[FatalDump], findings: Sequence[Finding]) -> list[Finding]:
    """A dump as its rank's native crash: the rank whose death by that signal a launcher (or its
    exit status) reports, when exactly one rank died of it; a dump of no such rank gives nothing."""
    out = []
    for dump in dumps:
        if dump.cause is None:
            continue
        ranks = {
            f.global_rank
            if f.global_rank is not None
            else (int(f.who) if f.who and f.who.isdigit() else None)
            for f in findings
            if f.cause == dump.cause and f.kind in (Kind.LAUNCHER, Kind.KERNEL) and f.role == CULPRIT
        }
        ranks.discard(None)
        if len(ranks) != 1:
            continue
        (rank,) = ranks
        assert rank is not None
        out.append(
            Finding(Kind.NATIVE_CRASH, dump.cause, CULPRIT, str(rank),
                    f"rank {rank}'s faulthandler dump: {dump.what}", dump.location, dump.source, dump.line, dump.line, rank)
        )  # fmt: skip
    return out
