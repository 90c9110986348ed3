"""`rankscope fr` as text a person reads top-down (formatting only)."""

from __future__ import annotations

from rankscope.folding import RankSet
from rankscope.fr.align import group_name, number, place
from rankscope.fr.report import FrReport, GroupView, RecentEntry


def progress_lines(group: GroupView) -> list[str]:
    """Ranks folded by where they are: ``ranks 1-2: enqueued #3 barrier from main (x.py:79), completed #2``."""
    by_place: dict[tuple[int, int, str, str], list[int]] = {}
    for p in group.progress:
        by_place.setdefault((p.last_enqueued, p.last_completed, p.op, place(p.call_site)), []).append(p.rank)
    lines = []
    for (enqueued, completed, op, site), ranks in sorted(by_place.items(), key=lambda kv: min(kv[1])):
        who = RankSet.of(ranks).phrase()
        what = f"enqueued {number(enqueued)}" + (f" {op}" if op else "") + (f" from {site}" if site else "")
        done = f"completed #{completed}" if completed >= 0 else "completed none"
        lines.append(f"{who}: {what}, {done}")
    if group.absent:
        lines.append(f"{RankSet.of(group.absent).phrase()}: no dump")
    return lines


def recent_line(entry: RecentEntry) -> str:
    """``#7 all_reduce_barrier [1] Float from fr_nccl.py:10, completed within 1.05 ms (the default group)``."""
    sizes = ", ".join("x".join(str(d) for d in s) or "scalar" for s in entry.sizes)
    tensors = f" [{sizes}] {'/'.join(entry.dtypes)}".rstrip() if entry.sizes else ""
    site = f" from {place(entry.call_site)}" if entry.call_site else ""
    if entry.duration_ms is not None:
        state = f"{entry.state}, took {entry.duration_ms:.3g} ms"
    elif entry.discovered_ms is not None and entry.state == "completed":
        state = f"completed within {entry.discovered_ms:.3g} ms of being enqueued"
    else:
        state = entry.state
    return f"{number(entry.seq)} {entry.op}{tensors}{site}: {state} ({entry.group})"


def render_text(report: FrReport, source: str = "") -> str:
    lines = []
    versions = f", recorder version {'/'.join(report.versions)}" if report.versions else ""
    count = len(report.rank_list)
    lines.append(
        f"rankscope fr: {count} dump{'s' if count != 1 else ''} ({RankSet.of(report.rank_list).phrase()})"
        + (f" from {source}" if source else "")
        + versions
    )
    lines.append("")
    lines.append("Verdict")
    lines.append(f"  {report.headline}")
    if len(report.divergences) > 1:
        lines.append("")
        lines.append(
            "The first divergence of every group and of every pair's sends and receives (the verdict's first)"
        )
        lines.extend(f"  {d.text}" for d in report.divergences)
    if report.groups:
        lines.append("")
        lines.append("Where every rank is (last collective enqueued / completed, per group)")
        for group in report.groups:
            lines.append(f"  {group_name(group.pg, group.desc)}, {RankSet.of(group.member_list).phrase()}")
            lines.extend(f"    {line}" for line in progress_lines(group))
    if report.recent:
        lines.append("")
        lines.append(f"Rank {report.rank_list[0]}'s last {len(report.recent)} operations (oldest first)")
        lines.extend(f"  {recent_line(r)}" for r in report.recent)
    if report.ras is not None:
        lines.append("")
        lines.append("NCCL RAS")
        lines.extend(f"  {line}" for line in report.ras.lines())
    for note in report.notes:
        lines.append(f"note: {note}")
    if report.unreadable:
        lines.append("")
        lines.append(f"Unreadable ({len(report.unreadable)})")
        lines.extend(f"  {u.path}: {u.reason}" for u in report.unreadable)
    return "\n".join(lines) + "\n"
