"""A `fr` report as a page: the verdict, then per process group and rank the collectives around the
first divergence, the divergent one marked (pure).

Ranks whose lanes are the same (same collectives, states and call sites) share one lane, so a
1,024-rank job where one rank is the odd one out draws two lanes per group, not 1,024.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from rankscope.folding import RankSet
from rankscope.fr.align import group_name, place
from rankscope.fr.records import Entry, RankDump
from rankscope.fr.render import progress_lines, render_text
from rankscope.fr.report import FrReport, GroupView
from rankscope.pictures.page import Collective, FrGroup, FrLane, FrSection, Page

#: Collectives kept per rank and group: the divergence and those before it (and a few after).
KEEP = 50
#: Of :data:`KEEP`, how many come after the divergence.
AFTER = 5
#: Collectives drawn in all (lanes x kept): beyond it each lane keeps fewer (at least :data:`LEAST`),
#: so that a page of ranks that all differ stays under half a megabyte.
BUDGET = 4_000
LEAST = 6
#: Distinct lanes drawn per group (the suspects' first); the ranks of the others are named in one line.
MAX_LANES = 256


def fr_page(report: FrReport, source: str = "", dumps: Optional[Sequence[RankDump]] = None) -> Page:
    header = render_text(report, source).split("\n", 1)[0]
    verdict = [report.headline]
    if len(report.divergences) > 1:
        verdict += [d.text for d in report.divergences]
    page = Page(title="rankscope fr", subtitle=header, verdict=verdict)
    if report.groups:
        page.sections.append(fr_section(report, dumps))
    page.notes = [*report.notes, *(f"unreadable: {u.path}: {u.reason}" for u in report.unreadable)]
    return page


def fr_section(report: FrReport, dumps: Optional[Sequence[RankDump]] = None, keep: int = KEEP) -> FrSection:
    """Per group and rank: with the dumps, each rank's last ``keep`` collectives around the group's
    first divergence; without them (a verdict joined to stacks), where each rank is."""
    by_rank = {d.rank: d for d in dumps or ()}
    groups = [_group(view, by_rank, keep) for view in report.groups]
    shown = sum(len(lane.collectives) for group in groups for lane in group.lanes)
    if shown > BUDGET:
        lanes = sum(len(group.lanes) for group in groups)
        keep = max(LEAST, min(keep, BUDGET // max(1, lanes)))
        groups = [_group(view, by_rank, keep) for view in report.groups]
    note = (
        f"each rank's last {keep} collectives of each group around its first divergence (at most "
        f"{min(AFTER, keep - 1)} after it); ranks with the same lane share it; at most {MAX_LANES} different "
        "lanes per group, the suspects' first; what is left out is counted"
        if by_rank
        else "where each rank is: its last collective enqueued and completed, per group"
    )
    return FrSection(title="Flight recorder, per group and rank", groups=groups, note=note)


def _group(view: GroupView, by_rank: dict[int, RankDump], keep: int) -> FrGroup:
    seq = view.divergence.seq if view.divergence is not None else -1
    return FrGroup(
        name=group_name(view.pg, view.desc),
        members=view.members,
        lanes=_lanes(view, by_rank, seq, keep) if by_rank else _summaries(view),
        divergence_seq=seq,
        divergence=view.divergence.text if view.divergence is not None else "",
    )


def _summaries(view: GroupView) -> list[FrLane]:
    lanes = []
    for line in progress_lines(view):
        who, _, what = line.partition(": ")
        lanes.append(FrLane(ranks=who, collectives=[], summary=what))
    return lanes


def _window(entries: list[Entry], seq: int, keep: int) -> tuple[int, int]:
    """Start and end of the entries shown: the last ``keep``, or those around the divergence."""
    if seq < 0:
        return max(0, len(entries) - keep), len(entries)
    at = next((i for i, e in enumerate(entries) if e.seq >= seq), len(entries))
    end = min(len(entries), at + min(AFTER, keep - 1))
    return max(0, end - keep), end


def _lanes(view: GroupView, dumps: dict[int, RankDump], seq: int, keep: int) -> list[FrLane]:
    shared: dict[tuple[object, ...], tuple[list[int], FrLane]] = {}
    for rank in view.member_list:
        dump = dumps.get(rank)
        if dump is None:
            continue
        entries = [e for e in dump.entries if e.pg == view.pg and not e.is_p2p]
        start, end = _window(entries, seq, keep)
        shown = [
            Collective(e.seq, e.op, e.state, place(e.site), diverges=e.seq == seq) for e in entries[start:end]
        ]
        lane = FrLane(ranks="", collectives=shown, left_out_before=start, left_out_after=len(entries) - end)
        key = (start, len(entries) - end, *((c.seq, c.op, c.state, c.where) for c in shown))
        shared.setdefault(key, ([], lane))[0].append(rank)
    suspects = set(view.divergence.suspects) if view.divergence is not None else set()
    # The lanes of the suspects first, then by their first rank; past MAX_LANES the rest are counted.
    groups = sorted(shared.values(), key=lambda item: (not suspects & set(item[0]), item[0][0]))
    lanes = []
    for ranks, lane in groups[:MAX_LANES]:
        lane.ranks = _who(ranks)
        lanes.append(lane)
    rest = sorted(rank for ranks, _ in groups[MAX_LANES:] for rank in ranks)
    if rest:
        left = len(groups) - MAX_LANES
        lanes.append(
            FrLane(ranks=_who(rest), collectives=[], summary=f"{left} more different lanes, left out")
        )
    if view.absent:
        lanes.append(FrLane(ranks=_who(view.absent), collectives=[], summary="no dump"))
    return lanes


def _who(ranks: list[int]) -> str:
    return RankSet.of(ranks).phrase()
