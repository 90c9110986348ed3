"""Undo Open MPI ``--tag-output`` fragmenting: one tag per *write*, not per line.

mpirun tags each chunk a rank writes, so a ``print`` that writes its text and its newline
separately, or two ranks writing at once, give physical lines such as::

    [1,1]<stdout>:step 1 on 1[1,2]<stdout>:step 1 on 2[1,1]<stdout>:
    [1,2]<stdout>:

A fragment belongs to the tag before it; a rank's line ends where one of its fragments is the
last on a physical line. :class:`OmpiJoiner` rebuilds whole lines, one tag each.
"""

from __future__ import annotations

import re

from rankscope.logs.sources import MAX_LINE

TAG = re.compile(rb"\[\d+,\d+\]<std(?:out|err|diag)>:")


#: ``mpirun --timestamp-output``: the date in front of each tag (``Fri Aug 11 12:31:45 2023[1,0]<stdout>:``).
TIMESTAMP = re.compile(rb"(?m)^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}(?=\[\d+,\d+\]<std)")


def without_timestamps(data: bytes) -> bytes:
    """The tags of ``--timestamp-output`` lines brought to the start of their lines (dates dropped)."""
    return TIMESTAMP.sub(b"", data)


def looks_timestamped(sample: bytes) -> bool:
    """Do most lines start with ``--timestamp-output``'s date and then an Open MPI tag?"""
    lines = [line for line in sample.split(b"\n")[:2000] if line]
    return bool(lines) and len(TIMESTAMP.findall(sample)) > len(lines) // 2


def looks_tagged(sample: bytes) -> bool:
    """Do most lines start with an Open MPI tag?"""
    lines = [line for line in sample.split(b"\n")[:2000] if line]
    if not lines:
        return False
    return sum(1 for line in lines if TAG.match(line)) > len(lines) // 2


class OmpiJoiner:
    """Feed chunks of whole physical lines; get back chunks of whole per-rank lines."""

    def __init__(self) -> None:
        self._pending: dict[bytes, bytes] = {}

    def feed(self, chunk: bytes) -> bytes:
        if chunk.count(b"]<std") == chunk.count(b"\n"):  # one tag per line already: nothing to do
            return chunk
        out: list[bytes] = []
        for line in chunk.split(b"\n")[:-1] if chunk.endswith(b"\n") else chunk.split(b"\n"):
            out.extend(self._line(line))
        return b"".join(part + b"\n" for part in out)

    def _line(self, line: bytes) -> list[bytes]:
        tags = list(TAG.finditer(line))
        if not tags or tags[0].start() != 0:
            return [line]  # mpirun's own messages, or text before any tag
        if len(tags) == 1:
            tag = tags[0].group()
            return [tag + self._pending.pop(tag, b"") + line[tags[0].end() :]]
        done: list[bytes] = []
        for index, match in enumerate(tags):
            tag = match.group()
            end = tags[index + 1].start() if index + 1 < len(tags) else len(line)
            text = self._pending.pop(tag, b"") + line[match.end() : end]
            if index + 1 == len(tags) or len(text) > MAX_LINE:
                # the physical newline ends this rank's line; a fragment grown past the line
                # cut is given out as a line too, so a rank that never ends one cannot fill memory
                done.append(tag + text)
            else:
                self._pending[tag] = text
        return done

    def flush(self) -> bytes:
        """Fragments never ended by a newline (the log stopped): one line each."""
        rest = b"".join(tag + text + b"\n" for tag, text in self._pending.items())
        self._pending.clear()
        return rest
