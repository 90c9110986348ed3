"""torchrun's failure summary: which ranks failed, with which exit code, and the root cause.

torchrun (torch.distributed.elastic) ends a failed run with a block like::

    Failures:
    [1]:
      time      : 2026-11-21_10:18:24
      host      : node7
      rank      : 1 (local_rank: 1)
      exitcode  : 1 (pid: 14289)
      ...
    Root Cause (first observed failure):
    [0]:
      ...

Each node's agent prints one for its own ranks. The "root cause" is the failure the agent
observed first, which is the launcher's view of the first rank to fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_FIELD = re.compile(rb"^\s+(time|host|rank|exitcode|traceback)\s*: ?(.*?)\s*$")
_RANK = re.compile(rb"(\d+)")
_LOCAL = re.compile(rb"local_rank: (\d+)")
_EXIT = re.compile(rb"(-?\d+)")
_SIGNAL = re.compile(rb"Signal (\d+) \((\w+)\)")
MARKERS = (b"Failures:", b"Root Cause (first observed failure):")


#: The source named by the findings of torchrun's failure summary.
SUMMARY_SOURCE = "(torchrun summary)"


@dataclass
class RankExit:
    """One entry of torchrun's failure summary (a ``torchrun_failures`` item of ``logs errors``)."""

    rank: int
    host: str
    exitcode: Optional[int]
    signal: Optional[str]
    root_cause: bool
    #: The ``(local_rank: N)`` of its ``rank :`` field, where printed.
    local_rank: Optional[int] = None
    #: The ``(pid: N)`` of its ``exitcode :`` field, where printed.
    pid: Optional[int] = None

    @property
    def how(self) -> str:
        if self.signal:
            return self.signal
        if self.exitcode is not None and self.exitcode < 0:
            return f"signal {-self.exitcode}"
        return f"exit {self.exitcode}"


_PID = re.compile(rb"\(pid: (\d+)\)")


def parse_summary_block(lines: list[bytes], root_cause: bool, prefix: bytes = b"") -> list[RankExit]:
    """Parse the entries that follow a ``Failures:`` or ``Root Cause`` marker line; ``prefix``: what
    stands before the marker on its line (pdsh's ``node1: ``, ``stderr: ``), removed from each line."""
    exits: list[RankExit] = []
    fields: dict[bytes, bytes] = {}

    def flush() -> None:
        if b"rank" in fields:
            number = _RANK.search(fields[b"rank"])
            local = _LOCAL.search(fields[b"rank"])
            code = _EXIT.search(fields.get(b"exitcode", b""))
            signal = _SIGNAL.search(fields.get(b"traceback", b""))
            pid = _PID.search(fields.get(b"exitcode", b""))
            if number is not None:
                exits.append(
                    RankExit(
                        rank=int(number.group(1)),
                        host=fields.get(b"host", b"?").decode("utf-8", "replace"),
                        exitcode=int(code.group(1)) if code else None,
                        signal=signal.group(2).decode() if signal else None,
                        root_cause=root_cause,
                        local_rank=int(local.group(1)) if local else None,
                        pid=int(pid.group(1)) if pid else None,
                    )
                )
        fields.clear()

    for line in lines:
        line = line.rstrip(b"\r")
        if prefix and line.startswith(prefix):
            line = line[len(prefix) :]
        if line.startswith((b"---", b"===")) or line in MARKERS:
            break
        if re.match(rb"^\[\d+\]:$", line):
            flush()
            continue
        match = _FIELD.match(line)
        if match is not None:
            fields[match.group(1)] = match.group(2)
    flush()
    return exits


def find_summaries(chunk: bytes) -> list[RankExit]:
    """Every torchrun failure entry in a chunk of whole lines (entries listed twice are kept once)."""
    exits: list[RankExit] = []
    for marker in MARKERS:
        pos = chunk.find(marker)
        while pos >= 0:
            start = chunk.find(b"\n", pos)
            if start < 0:
                break
            block = chunk[start + 1 : start + 1 + 64 * 1024].split(b"\n")
            prefix = chunk[chunk.rfind(b"\n", 0, pos) + 1 : pos]
            exits.extend(parse_summary_block(block, marker != MARKERS[0], prefix if prefix.strip() else b""))
            pos = chunk.find(marker, start)
    return exits
