"""NCCL's own reason for a ``torch.distributed.DistBackendError`` (pure), read from the lines that
follow torch's exception line: torch's message names only NCCL's class of error (``unhandled
system error``), and NCCL goes on with its error name and its ``Last error:`` detail::

    torch.distributed.DistBackendError: NCCL error in: ...ProcessGroupNCCL.cpp:1970, unhandled system error ...
    ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
    Last error:
    socketStartConnect: Connect to 10.20.0.15<48113> failed : Software caused connection abort

Those lines are a traceback's tail (rankscope.logs.tracebacks) or, for an exception line whose
traceback header is not in the log, the lines its rank wrote next (rankscope.logs.line_evidence).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: NCCL's own error name (``ncclSystemError: ...``, ``ncclInvalidUsage: ...``).
_NCCL_ERROR_NAME = re.compile(r"^nccl(?:[A-Z]\w*Error|InvalidArgument|InvalidUsage): ")
#: How much of NCCL's error name and ``Last error:`` detail is kept.
LAST_ERROR_SHOWN = 300


@dataclass(frozen=True)
class NcclReason:
    """NCCL's error name line and its ``Last error:`` detail; either may be empty."""

    name: str = ""
    last_error: str = ""

    def __bool__(self) -> bool:
        return bool(self.name or self.last_error)

    def lines(self) -> list[str]:
        """As `logs errors` prints it under the error: ``ncclSystemError: ...``, ``last error: ...``."""
        return [
            *([self.name] if self.name else []),
            *([f"last error: {self.last_error}"] if self.last_error else []),
        ]

    def evidence(self) -> list[str]:
        """As a verdict cites it: ``NCCL's error: ncclSystemError: ...``, ``NCCL's last error: ...``."""
        return [
            *([f"{CITED[0]}{self.name}"] if self.name else []),
            *([f"{CITED[1]}{self.last_error}"] if self.last_error else []),
        ]


#: How :meth:`NcclReason.evidence` begins each line (a verdict's evidence cites them so).
CITED = ("NCCL's error: ", "NCCL's last error: ")


def nccl_reason(lines: Sequence[str]) -> NcclReason:
    """NCCL's error name and its ``Last error:`` detail (the next non-empty line when that one is
    empty) among ``lines``, the lines after the exception line, prefixes removed."""
    name = ""
    for index, line in enumerate(lines):
        text = line.strip()
        if _NCCL_ERROR_NAME.match(text) and not name:
            name = text[:LAST_ERROR_SHOWN]
        elif text.startswith("Last error:"):
            detail = text[len("Last error:") :].strip()
            if not detail:
                detail = next((t.strip() for t in lines[index + 1 :] if t.strip()), "")
            return NcclReason(name, detail[:LAST_ERROR_SHOWN])
    return NcclReason(name)


def is_nccl_name(line: str) -> bool:
    """Is ``line`` NCCL's error name line (``ncclRemoteError: ...``)?"""
    return _NCCL_ERROR_NAME.match(line.strip()) is not None
