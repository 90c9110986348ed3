"""The flight recorder's verdict joined with live stacks (pure): what went wrong first, then where
everyone is now.

`rankscope stacks --fr DUMPS` puts :func:`verdict_lines` above the stack groups and
:func:`group_note` after each main-thread group: the last collective its ranks enqueued and
completed, from their own records. :func:`join_p2p_waits` names the ranks the stacks show waiting
in a point-to-point call, which gloo's recorder does not record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Callable, Optional

from rankscope.folding import RankSet
from rankscope.fr.align import DEFAULT_PG, group_name, headline, number, place
from rankscope.fr.report import MISSING, Divergence, FrReport, GroupView, P2PWait, RankProgress
from rankscope.model import Frame, Member


def verdict_lines(report: FrReport) -> list[str]:
    """The recorders' verdict, first divergence first (the lines above the stack groups); titled a
    desync only when the ranks disagree (a one-rank job's dump, a missing dump, ... are not one)."""
    title = "Collective desync (flight recorder)" if report.desync else "Flight recorder"
    lines = [title, f"  {report.headline}"]
    lines.extend(f"  {d.text}" for d in report.divergences[1:])
    return lines


def _progress_words(progress: Sequence[RankProgress], group: GroupView) -> str:
    where = "" if group.desc == DEFAULT_PG else f" in {group_name(group.pg, group.desc)}"
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
        parts.append(f"{str(RankSet.of(ranks))} enqueued {number(value)}")
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
            words.append(f"flight-recorder dump of {RankSet.of(refused).phrase()} refused")
        missing = sorted(r for r in ranks if r in report.absent and r not in refused)
        if missing:
            words.append(f"no flight-recorder dump from {RankSet.of(missing).phrase()}")
        return "; ".join(words)

    return note


@dataclass(frozen=True)
class LiveWait:
    """One rank's main thread, as its live stack shows it, blocked in a point-to-point call."""

    op: str
    call_site: Optional[Frame] = None
    #: recv's ``src`` or send's ``dst`` (from the stack's local variables); None when not known.
    peer: Optional[int] = None


#: What the verdict says of a point-to-point wait: no recorder of gloo shows one.
P2P_UNRECORDED = "point-to-point; gloo records no send/recv"


def _peer_words(wait: P2PWait) -> str:
    way = {"recv": "from", "send": "to"}.get(wait.op, "with")
    return f"{RankSet.of(wait.rank_list).phrase()} {way} rank {wait.peer}"


def _grouped(ranks: Sequence[int], waits: Mapping[int, LiveWait]) -> list[P2PWait]:
    by_wait: dict[LiveWait, list[int]] = {}
    for rank in ranks:
        if rank in waits:
            by_wait.setdefault(waits[rank], []).append(rank)
    return sorted(
        (P2PWait(str(RankSet.of(r)), r, w.op, w.call_site, w.peer) for w, r in by_wait.items()),
        key=lambda w: w.rank_list,
    )


def _wait_phrases(p2p: Sequence[P2PWait]) -> str:
    """One phrase per call and line; the peers, where the stacks' locals name them, after it."""
    calls: dict[tuple[str, Optional[Frame]], list[P2PWait]] = {}
    for wait in p2p:
        calls.setdefault((wait.op, wait.call_site), []).append(wait)
    phrases = []
    for (op, site), same in calls.items():
        ranks = sorted(r for w in same for r in w.rank_list)
        verb = "wait" if len(ranks) > 1 else "waits"
        where = f" called from {place(site)}" if site is not None else ""
        known = [w for w in same if w.peer is not None]
        peers = f": {', '.join(_peer_words(w) for w in known)}" if known else ""
        phrase = f"{RankSet.of(ranks).phrase()} {verb} in {op} ({P2P_UNRECORDED}){where}{peers}"
        if len(known) < len(same):
            phrase += ", peer not known (`rankscope stacks --locals` reads src/dst from the stacks)"
        phrases.append(phrase)
    return "; ".join(phrases)


def join_p2p_waits(report: FrReport, waits: Mapping[int, LiveWait]) -> FrReport:
    """The verdict joined with the ranks whose live stack waits in ``recv``/``send``/``batch_isend_irecv``
    (gloo records no send/recv, so only the stacks tell): a ``missing`` divergence's suspects that wait
    so are named as a point-to-point wait first; the other waiting ranks after the headline (``no
    desync`` says nothing of them otherwise). ``report`` is not changed; joined once only."""
    if not waits or report.p2p_waits is not None or any(d.p2p_waits is not None for d in report.divergences):
        return report
    swapped: dict[int, Divergence] = {}
    named: set[int] = set()
    for d in report.divergences:
        if d.kind == MISSING and any(r in waits for r in d.suspects):
            p2p = _grouped(d.suspects, waits)
            swapped[id(d)] = replace(d, text=f"{_wait_phrases(p2p)}; so {d.text}", p2p_waits=p2p)
            named.update(r for w in p2p for r in w.rank_list)
    rest = _grouped([r for r in sorted(waits) if r not in named], waits)
    joined = replace(
        report,
        divergences=[swapped.get(id(d), d) for d in report.divergences],
        groups=[replace(g, divergence=swapped.get(id(g.divergence), g.divergence)) for g in report.groups],
        p2p_waits=rest or None,
    )
    joined.headline = headline(joined) + (f"; {_wait_phrases(rest)}" if rest else "")
    return joined
