"""Heads that the way a log was collected puts in front of every line, before any rank prefix.

A log read back from a container runtime, Kubernetes or the journal carries the transport's own
head on each line, so the launcher's prefix (``[default1]:``, ``[rank3]:``) no longer starts the
line and nothing would be read as a rank. When most lines of a source's head have one of these
forms, it is removed from every line of the source before anything else reads it:

- ``kubectl logs --timestamps``: ``2025-03-04T07:12:01.482913201Z text`` (RFC 3339, one space);
- the CRI log files of a node (``/var/log/pods/.../0.log``, containerd, CRI-O):
  ``2024-08-21T13:02:47.900120003+00:00 stderr F text``; a ``P`` (partial) line is joined to
  the line after it, as the runtime split it;
- Docker's ``json-file`` driver (``docker inspect`` ``LogPath``):
  ``{"log":"text\\n","stream":"stderr","time":"..."}``, the text decoded; an entry whose text
  does not end in a newline is joined to the next one;
- Determined's trial logs: ``[2024-02-27T21:05:16.440112Z] fa88a9df [rank=0] || text`` (the time and
  the container's id; its ``[rank=N] || `` is the rank's prefix, rankscope.logs.prefixes);
- ``journalctl`` (``short`` and ``short-iso`` output, syslog files):
  ``Nov 26 03:14:05 gpu-a3 torchrun[81700]: text``;
- a time stamped on every line by the tool that saved the output (moreutils' ``ts``, a CI runner,
  ``awk '{print strftime(), $0}'``): ``2024-06-14 10:20:03 text``, ``Jun 14 10:20:03 text``,
  ``[2024-06-14 10:20:03] text``. A logger's own time looks the same at the start of its lines, so
  this one is taken only where a stamped line goes on with a rank's prefix or a traceback's line
  (``2024-06-14 10:20:03 [rank2]: ...``, ``... Traceback (most recent call last):``, ``...   File
  "``): a logger stamps its records, never a traceback's lines;
- vLLM's logger, which does put its head before every line of a record, a traceback's too:
  ``ERROR 07-14 10:23:49 [core.py:517] Traceback (most recent call last):`` (taken where such a
  traceback line is in the sample);
- Python's ``logging`` in the form Hugging Face's examples use, where a trainer sends its ranks'
  output through its logger: ``2025-10-30 22:41:58,303 - trainer - INFO - [rank2]: text`` (taken,
  like a stamp, where such a line goes on with a rank's prefix or a traceback's line).

The times of these heads are dropped with them (a line's own time after its prefix is still read).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

_RFC3339 = rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)"
_CRI = re.compile(rb"(?m)^" + _RFC3339 + rb" std(?:out|err) ([FP]) ([^\n]*)(\n?)")
_KUBECTL = re.compile(rb"(?m)^" + _RFC3339 + rb" ")
_JOURNAL = re.compile(
    rb"(?m)^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|"
    + _RFC3339
    + rb") [\w.-]{1,253} [^\s:\[\]]{1,100}(?:\[\d+\])?: "
)
_DOCKER = re.compile(rb'(?m)^\{"log":"')
#: Determined's trial logs (its web UI, ``det trial logs --timestamps``): the time and the container's id.
_DETERMINED = re.compile(rb"(?m)^\[" + _RFC3339 + rb"\] [0-9a-f]{6,16} (?=\[rank=\d+\] \|\| |\|\| )")
_STAMP = (
    rb"(?:\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\]?"
    rb"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d{1,9})?) "
)
_STAMPED = re.compile(rb"(?m)^" + _STAMP)
#: What tells a stamping tool's lines from a logger's: a stamped rank prefix or traceback line.
_STAMPED_TELL = re.compile(rb"(?m)^" + _STAMP + rb'(?:\[[^\]\n]{1,64}\]:|Traceback \(most recent|  File ")')
#: vLLM's (and sglang's) logger, which writes every line of a record behind its head, a traceback's
#: too: ``ERROR 07-14 10:23:49 [core.py:517]   File "..."``.
_LOGGER = re.compile(
    rb"(?m)^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[\w.]+:\d+\] "
)
_LOGGER_TELL = re.compile(_LOGGER.pattern + rb'(?:Traceback \(most recent|  File ")')
#: Python's ``logging`` with the format of Hugging Face's examples and many trainers,
#: ``%(asctime)s - %(name)s - %(levelname)s - `` or ``%(asctime)s - %(levelname)s - %(name)s - ``
#: (``2025-10-30 22:41:58,303 - trainer - INFO - ``, ``10/30/2025 22:41:58 - INFO - __main__ - ``),
#: put before every line where a trainer sends its ranks' output through its logger.
_PYLOG = re.compile(
    rb"(?m)^(?:\d{4}-\d\d-\d\d|\d\d/\d\d/\d{4})[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,6})? - "
    rb"(?:[\w.\-]{1,64} - )?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?: - [\w.\-]{1,64})? - "
)
_PYLOG_TELL = re.compile(_PYLOG.pattern + rb'(?:\[[^\]\n]{1,64}\]:|Traceback \(most recent|  File ")')


def _cri(data: bytes) -> bytes:
    def line(match: re.Match[bytes]) -> bytes:
        # a partial line at the end of a block keeps its newline: a block ends a line
        partial = match.group(1) == b"P" and match.end() < len(data)
        return match.group(2) + (b"" if partial else match.group(3))

    return _CRI.sub(line, data)


def _docker(data: bytes) -> bytes:
    out: list[bytes] = []
    for line in data.split(b"\n"):
        if not line.startswith(b'{"log":'):
            if line:
                out.append(line + b"\n")
            continue
        try:
            entry = json.loads(line)
            text = entry["log"]
        except (ValueError, KeyError, TypeError):
            out.append(line + b"\n")  # not an entry after all: kept as it is
            continue
        out.append(str(text).encode("utf-8", "surrogateescape"))
    joined = b"".join(out)
    # an entry without its newline is a line the runtime split; the block still ends a line
    return joined if not joined or joined.endswith(b"\n") else joined + b"\n"


@dataclass(frozen=True)
class Head:
    """One form of per-line head: how to tell a line has it, how to remove it from a block."""

    name: str
    pattern: re.Pattern[bytes]
    strip: Callable[[bytes], bytes]
    #: Where a logger writes the same head before its own records: a line that only a head put
    #: before every line has (a traceback's), which the sample must hold too.
    tell: Optional[re.Pattern[bytes]] = None


HEADS = (
    Head("cri", _CRI, _cri),
    Head("docker-json", _DOCKER, _docker),
    Head("journal", _JOURNAL, lambda data: _JOURNAL.sub(b"", data)),
    Head("determined", _DETERMINED, lambda data: _DETERMINED.sub(b"", data)),
    Head("kubectl-timestamps", _KUBECTL, lambda data: _KUBECTL.sub(b"", data)),
    Head("stamped", _STAMPED, lambda data: _STAMPED.sub(b"", data), _STAMPED_TELL),
    Head("logger", _LOGGER, lambda data: _LOGGER.sub(b"", data), _LOGGER_TELL),
    Head("python-logging", _PYLOG, lambda data: _PYLOG.sub(b"", data), _PYLOG_TELL),
)


_NOT_BLANK = re.compile(rb"[^\s]")


def sniff_head(sample: bytes) -> Optional[Head]:
    """The head most (non-empty) lines of a source's first block start with, if any.

    The sample is read in place, line by line (the first 2000): no copy of it is made, which a
    block that is one 4 MiB line would make costly."""
    counts = [0] * len(HEADS)
    lines = pos = 0
    while pos < len(sample) and lines < 2000:
        end = sample.find(b"\n", pos)
        end = len(sample) if end < 0 else end
        if _NOT_BLANK.search(sample, pos, end) is not None:
            lines += 1
            for index, head in enumerate(HEADS):
                if head.pattern.match(sample, pos):
                    counts[index] += 1
        pos = end + 1
    if not lines:
        return None
    for head, count in zip(HEADS, counts):
        if count > lines // 2 and (head.tell is None or head.tell.search(sample) is not None):
            return head
    return None
