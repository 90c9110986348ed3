"""The doctor's verdicts: one :class:`Check` per question, each with the exact fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.model import Words
from rankscope.serial import OMIT_NONE


class Status(Words):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    #: Not applicable on this node (no AMD GPU, no NVIDIA driver, variable not set).
    SKIP = "SKIP"


@dataclass(frozen=True)
class Check:
    #: Short stable name (``ptrace``, ``core-dumps``, ``NCCL_SOCKET_IFNAME``).
    name: str
    status: Status
    #: What was found, in one line.
    summary: str
    #: The exact command or setting that fixes it (WARN and FAIL).
    fix: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: Supporting lines (devices, the topology matrix, where cores land).
    detail: tuple[str, ...] = ()


@dataclass(frozen=True)
class DoctorReport:
    SCHEMA: ClassVar[str] = "rankscope.doctor/1"

    host: str
    checks: tuple[Check, ...]

    @property
    def failed(self) -> bool:
        return any(check.status == Status.FAIL for check in self.checks)

    def count(self, status: Status) -> int:
        return sum(1 for check in self.checks if check.status == status)
