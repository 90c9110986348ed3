"""The flight recorder's verdict joined with live stacks (pure): what went wrong first, then where
everyone is now.

`rankscope stacks --fr DUMPS` puts :func:`verdict_lines` above the stack groups and
:func:`group_note` after each main-thread group: the last collective its ranks enqueued and
completed, from their own records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

from rankscope.folding import fold_ints
from rankscope.fr.align import number, place
from rankscope.fr.report import FrReport, GroupView, RankProgress
from rankscope.model import Member


def verdict_lines(report: FrReport) -> list[str]:
    """The desync verdict, first divergence first (the lines above the stack groups)."""
    lines = ["Collective desync (flight recorder)", f"  {report.headline}"]
    lines.extend(f"  {d.text}" for d in report.divergences[1:])
    return lines


def _progress_words(progress: Sequence[RankProgress], group: GroupView) -> str:
    where = "" if group.desc == "default_pg" else f" in group {group.pg}"
    enqueued = {p.last_enqueued for p in progress}
    completed = {p.last_completed for p in progress}
    if len(enqueued) == 1 and len(completed) == 1:
        first = progress[0]
        op = f" {first.op}" if first.op else ""
        site = f" from {place(first.call_site)}" if first.call_site else ""
        done = first.last_completed
        return (
            f"fr{where}: enqueued {number(first.last_enqueued)}{op}{site}, completed #{done}"
            if done >= 0
            else (f"fr{where}: enqueued {number(first.last_enqueued)}{op}{site}, none completed")
        )
    parts = []
    for value in sorted(enqueued):
        ranks = [p.rank for p in progress if p.last_enqueued == value]
        parts.append(f"{fold_ints(ranks)} enqueued {number(value)}")
    return f"fr{where}: " + ", ".join(parts)


def group_note(report: FrReport) -> Callable[[Sequence[Member]], str]:
    """Words for one stack group's ranks: their last enqueued/completed collective per group they are in."""

    def note(members: Sequence[Member]) -> str:
        ranks = {m.rank for m in members if m.rank is not None}
        words = []
        for group in report.groups:
            progress = [p for p in group.progress if p.rank in ranks]
            if progress:
                words.append(_progress_words(progress, group))
        refused = sorted(x.rank for x in report.refused if x.rank in ranks)
        if refused:
            words.append(
                f"flight-recorder dump of {'ranks' if len(refused) > 1 else 'rank'} {fold_ints(refused)} refused"
            )
        missing = sorted(r for r in ranks if r in report.absent and r not in refused)
        if missing:
            words.append(
                f"no flight-recorder dump from {'ranks' if len(missing) > 1 else 'rank'} {fold_ints(missing)}"
            )
        return "; ".join(words)

    return note
