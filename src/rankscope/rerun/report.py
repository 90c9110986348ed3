"""The ``rankscope.rerun`` document: the command, how it ended, its error and user frame, the comparison."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.rerun.compare import Comparison, FailurePoint


@dataclass
class RerunDocument:
    """``rankscope.rerun``: the command, how it ended, its error and user frame, the comparison."""

    SCHEMA: ClassVar[str] = "rankscope.rerun/1"

    command: list[str]
    #: What the rerun set in the command's environment.
    environment: dict[str, str]
    exit_code: int
    timed_out: bool
    #: The fatal error of the rerun (with ``user_frame``), None when it left no traceback.
    error: Optional[FailurePoint]
    comparison: Optional[Comparison]
    warnings: list[str] = field(default_factory=list)
