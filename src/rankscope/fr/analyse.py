"""The whole `rankscope fr` pipeline on a path: read the dumps, align them, judge, join NCCL's RAS report.

Used by `rankscope fr` and by `stacks --fr`; raises :class:`rankscope.errors.BadInputError` for a RAS
file that cannot be read or parsed (the dumps' own failures are data in the report).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rankscope.errors import BadInputError
from rankscope.fr.align import analyse
from rankscope.fr.collect import read_dumps
from rankscope.fr.ras import parse_ras, ras_notes
from rankscope.fr.records import DEFAULT_LIMITS, Limits, RankDump
from rankscope.fr.report import FrReport


def analyse_path(
    path: Path, ras: Optional[Path] = None, world_size: Optional[int] = None, limits: Limits = DEFAULT_LIMITS
) -> FrReport:
    """Every dump under ``path`` (a directory or a file prefix) read, aligned and judged; ``ras``: NCCL
    RAS output joined; ``world_size``: the job's, when the last ranks left no dump."""
    return analyse_dumps(path, ras, world_size, limits)[0]


def analyse_dumps(
    path: Path, ras: Optional[Path] = None, world_size: Optional[int] = None, limits: Limits = DEFAULT_LIMITS
) -> tuple[FrReport, list[RankDump]]:
    """:func:`analyse_path`'s verdict, and the dumps it was made from (the page draws their entries)."""
    collected = read_dumps(path, limits)
    report = analyse(collected.dumps, collected.unreadable, world_size, collected.refused)
    if ras is not None:
        try:
            text = ras.read_text(errors="replace")
        except OSError as err:
            raise BadInputError(f"{ras}: {err.strerror or err}") from None
        try:
            report.ras = parse_ras(text)
        except ValueError as err:
            raise BadInputError(f"{ras}: {err}") from None
        report.notes.extend(ras_notes(report.ras, len(report.rank_list), len(report.absent)))
    return report, collected.dumps
