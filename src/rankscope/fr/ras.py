"""NCCL's RAS report (the ``ncclras`` client's text, NCCL >= 2.24), read into facts (pure).

What the text holds (checked on NCCL 2.28.9's output, tests/data/gpu-h100/ncclras_1rank.txt): the
NCCL version, a job summary (nodes, processes, GPUs), a communicators table with one row per group of
communicators (status RUNNING/..., errors OK/...), then an ``Errors`` and a ``Warnings`` section
whose lines name missing, dead or mismatched ranks. RAS has no call sites: rankscope joins its counts
with the flight recorder, which has them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class RasCommGroup:
    group: int
    comms: int
    nodes_per_comm: int
    ranks_per_node: int
    ranks_per_comm: int
    ranks_in_group: int
    status: str
    errors: str


@dataclass
class RasReport:
    nccl_version: str = ""
    nodes: Optional[int] = None
    processes: Optional[int] = None
    gpus: Optional[int] = None
    communicators: list[RasCommGroup] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def healthy(self) -> bool:
        return not self.errors and all(c.errors == "OK" and c.status == "RUNNING" for c in self.communicators)

    def lines(self) -> list[str]:
        out = [
            f"NCCL {self.nccl_version or '?'}: {self.nodes} node(s), {self.processes} process(es), {self.gpus} GPU(s)"
        ]
        for comm in self.communicators:
            out.append(
                f"communicator group {comm.group}: {comm.comms} communicator(s) of {comm.ranks_per_comm} rank(s), "
                f"{comm.status}, errors {comm.errors}"
            )
        out.extend(f"error: {e}" for e in self.errors)
        out.extend(f"warning: {w}" for w in self.warnings)
        if self.healthy():
            out.append("RAS sees every rank running with no errors")
        return out


_VERSION = re.compile(r"^NCCL version (\S+)")
_NUMBERS = re.compile(r"^\s*\d+(\s+\d+)+\s*$")
_COMM_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$")


def parse_ras(text: str) -> RasReport:
    """The report's facts; ValueError when the text is not ncclras output."""
    report = RasReport()
    section = ""
    lines = text.splitlines()
    seen = False
    for index, line in enumerate(lines):
        stripped = line.strip()
        nxt = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if nxt and set(nxt) == {"="}:
            section = stripped.split("...")[0].strip().lower()
            seen = True
            continue
        if not stripped or set(stripped) == {"="}:
            continue
        match = _VERSION.match(stripped)
        if match:
            report.nccl_version = match.group(1)
            seen = True
            continue
        if section == "job summary" and _NUMBERS.match(line):
            numbers = [int(v) for v in line.split()]
            if len(numbers) >= 5:
                report.nodes, report.processes, report.gpus = numbers[0], numbers[3], numbers[4]
        elif section == "communicators":
            row = _COMM_ROW.match(line)
            if row:
                g, comms, nodes, per_node, per_comm, in_group = (int(v) for v in row.groups()[:6])
                report.communicators.append(
                    RasCommGroup(g, comms, nodes, per_node, per_comm, in_group, row.group(7), row.group(8))
                )
        elif section == "errors":
            report.errors.append(stripped)
        elif section == "warnings":
            report.warnings.append(stripped)
    if not seen:
        raise ValueError("not ncclras output (no 'NCCL version' line, no sections)")
    return report


def ras_notes(ras: RasReport, dumped_ranks: int, absent: int) -> list[str]:
    """RAS's counts beside the recorder's: ranks RAS sees that left no dump, and its errors (pure)."""
    notes = []
    total = ras.processes
    if total is not None and total > dumped_ranks:
        notes.append(
            f"NCCL RAS counts {total} process(es); {dumped_ranks} left a flight-recorder dump"
            + (f" ({absent} known to be missing)" if absent else "")
        )
    for comm in ras.communicators:
        if comm.status != "RUNNING" or comm.errors != "OK":
            notes.append(
                f"NCCL RAS: communicator group {comm.group} ({comm.ranks_per_comm} ranks per communicator) is "
                f"{comm.status} with errors {comm.errors}"
            )
    notes.extend(f"NCCL RAS error: {line}" for line in ras.errors)
    return notes
