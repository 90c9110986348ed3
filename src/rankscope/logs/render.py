"""Text for a person (pure): the reports of `logs ranks` and `logs split`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rankscope.logs.demux import SplitFile
from rankscope.logs.inventory import Inventory, RanksDocument
from rankscope.logs.labels import fold_labels

#: What `logs ranks` says when no line carries a rank prefix.
NO_PREFIX = (
    "note: no line carries a rank prefix; add one at the source: "
    "torchrun --role $(hostname -s): --tee 3, srun --label, mpirun --tag-output, "
    "or rankscope prefix -- CMD"
)


def render_ranks(inventory: Inventory, document: RanksDocument, notes: Sequence[str]) -> str:
    """Which ranks wrote how many lines (and when), the unprefixed lines, the reading's notes."""
    labels = list(inventory.ranks)
    lines = [f"{len(labels)} rank(s): {fold_labels(labels) or '-'}   {inventory.lines} lines"]
    for row in document.ranks:
        times = f"  {row.first_time} .. {row.last_time}" if row.first_time else ""
        lines.append(f"  {row.label:>20}  {row.lines:>10} lines{times}")
    if inventory.unprefixed:
        lines.append(f"  {'(no rank prefix)':>20}  {inventory.unprefixed:>10} lines")
    lines += [f"note: {note}" for note in notes]
    if not labels:
        lines.append(NO_PREFIX)
    return "\n".join(lines)


def render_split(out_dir: Path, files: Sequence[SplitFile], notes: Sequence[str]) -> str:
    """The files `logs split` wrote, one line each, and the reading's notes."""
    lines = [f"wrote {len(files)} file(s) to {out_dir}/"]
    for row in files:
        name = Path(row.file).name
        lines.append(f"  {name:>28}  {row.lines:>10} lines  ({row.label or 'no rank prefix'})")
    lines += [f"note: {note}" for note in notes]
    return "\n".join(lines)
