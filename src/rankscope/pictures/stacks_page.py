"""A `stacks` report as a page: the verdict, the merged call tree as an icicle, the node-by-rank grid,
progress steps and GPUs, the flight-recorder view when a verdict was joined (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

from rankscope.folding import describe_members, fold_hosts
from rankscope.model import Frame, Member
from rankscope.pictures.page import (
    FlameNode,
    FlameSection,
    GridCell,
    GridRow,
    GridSection,
    Page,
    Section,
    TableSection,
)
from rankscope.stacks.frames import describe_frame, is_library, locate, short_native_name
from rankscope.stacks.merge import TreeNode, build_tree
from rankscope.stacks.render import FoldedRun, fold_frames, render_text
from rankscope.stacks.report import Diagnosis, StackGroup, StacksReport

Item = Union[Frame, FoldedRun]


def stacks_page(
    report: StacksReport,
    diagnosis: Diagnosis,
    full: bool = False,
    above: Sequence[str] = (),
    fr: Any = None,
) -> Page:
    """``above``: the flight-recorder verdict's lines (the text report puts them above the diagnosis);
    ``fr``: that verdict (a rankscope.fr FrReport), drawn per group and rank."""
    header = render_text(report, diagnosis, full=full).split("\n", 1)[0]
    page = Page(
        title="rankscope stacks",
        subtitle=header,
        verdict=[*(line.strip() for line in above), *diagnosis_lines(diagnosis)],
    )
    page.sections.extend(stacks_sections(report, diagnosis, full))
    if fr is not None:
        from rankscope.pictures.fr_page import fr_section

        page.sections.append(fr_section(fr))
    return page


def diagnosis_lines(diagnosis: Diagnosis) -> list[str]:
    """The diagnosis as the text report words it: its findings (or headline), then its notes."""
    lines = [f.text for f in diagnosis.findings] or [diagnosis.headline]
    return lines + [f"note: {note}" for note in diagnosis.notes]


def stacks_sections(
    report: StacksReport, diagnosis: Diagnosis, full: bool = False, named_by: str = "the diagnosis"
) -> list[Section]:
    """The pictures of a stacks report, for a page of its own or a page that joins several reports
    (``named_by``: whose culprits ``diagnosis.divergent`` holds, in the tree's title)."""
    culprits = set(diagnosis.divergent)
    multi_host = len(report.hosts) > 1
    sections: list[Section] = []
    roles: dict[str, list[StackGroup]] = {}
    for group in [*report.main_groups(), *report.other_groups()]:
        roles.setdefault(group.thread, []).append(group)
    roots = [_role_root(role, groups, full, culprits, multi_host) for role, groups in roles.items()]
    if roots:
        total = max(root.count for root in roots)
        sections.append(
            FlameSection(
                title=f"Merged call tree (width: ranks; red: only the ranks {named_by} names; grey: library frames)",
                roots=roots,
                total=total,
                named_by=named_by,
            )
        )
    if multi_host:
        sections.append(_grid(report, culprits))
    sections.extend(_facts(report, multi_host))
    return sections


def _item_node(item: Item, full: bool) -> FlameNode:
    if isinstance(item, FoldedRun):
        return FlameNode(
            name=item.text,
            where="",
            ranks="",
            count=0,
            library=True,
            folded=[describe_frame(f, not full) for f in item.frames],
        )
    name = short_native_name(item.function) if item.is_native and not full else item.function
    path = item.filename if item.filename != item.short_filename and not item.is_native else ""
    return FlameNode(name=name, where=item.location, ranks="", count=0, path=path, library=is_library(item))


def _role_root(
    role: str, groups: Sequence[StackGroup], full: bool, culprits: set[Member], multi_host: bool
) -> FlameNode:
    """The thread role as the root frame, then the text report's tree (stacks/merge.build_tree: chains
    of frames shared by the same ranks), each chain folded as the text report folds it."""
    root = FlameNode(name=role, where="", ranks="", count=0)
    _fill(root, list(dict.fromkeys(m for g in groups for m in g.members)), culprits, multi_host)
    root.children = _chains(build_tree(groups), full, culprits, multi_host)
    return root


def _fill(node: FlameNode, members: list[Member], culprits: set[Member], multi_host: bool) -> None:
    node.ranks = describe_members(members, with_hosts=multi_host)
    node.count = len(members)
    node.culprit = bool(culprits) and all(m in culprits for m in members)


def _chains(
    branches: Sequence[TreeNode], full: bool, culprits: set[Member], multi_host: bool
) -> list[FlameNode]:
    out = []
    for branch in branches:
        chain = [_item_node(item, full) for item in fold_frames(branch.frames, full)]
        for node in chain:
            _fill(node, branch.members, culprits, multi_host)
        below = _chains(branch.children, full, culprits, multi_host)
        if not chain:  # a group that ends where its branch splits: its ranks stop at the parent
            out.extend(below)
            continue
        for parent, child in zip(chain, chain[1:]):
            parent.children = [child]
        chain[-1].children = below
        out.append(chain[0])
    out.sort(key=lambda n: -n.count)
    return out


def group_spot(group: StackGroup) -> str:
    """Where a group is, in a few words: its collective and caller, or its innermost user frame."""
    place = locate(group.frames)
    if place.collective:
        return place.text()
    frame = place.caller or place.innermost
    return describe_frame(frame) if frame else "no frames"


def _grid(report: StacksReport, culprits: set[Member]) -> GridSection:
    main = report.main_groups()
    group_of = {m: index for index, g in enumerate(main) for m in g.members}
    labels = [f"{group_spot(g)} — {describe_members(g.members, with_hosts=True)}" for g in main]
    rows: dict[str, list[GridCell]] = {}
    processes = sorted(
        report.processes, key=lambda p: (p.rank.host, p.rank.rank if p.rank.rank is not None else -1)
    )
    for process in processes:
        member = process.member
        rank = str(member.rank) if member.rank is not None else f"pid {member.pid}"
        rows.setdefault(member.host, []).append(GridCell(rank, group_of.get(member, -1), member in culprits))
    return GridSection(
        title=f"Nodes by rank ({fold_hosts(rows)}), coloured by main-thread stack",
        groups=labels,
        rows=[GridRow(node, cells) for node, cells in rows.items()],
    )


def _facts(report: StacksReport, multi_host: bool) -> list[Section]:
    sections: list[Section] = []
    by_step: dict[str, list[Member]] = {}
    ages: dict[str, list[float]] = {}
    for process in report.processes:
        if process.progress is not None:
            text = process.progress.text() or "no step"
            by_step.setdefault(text, []).append(process.member)
            ages.setdefault(text, []).append(process.progress.age)
    if by_step:
        rows = [
            [text, describe_members(members, with_hosts=multi_host), _age_range(ages[text])]
            for text, members in sorted(by_step.items(), key=lambda kv: kv[0])
        ]
        sections.append(
            TableSection("Progress steps (rankscope.progress)", ["step", "ranks", "last marker"], rows)
        )
    if report.gpus:
        rows = [
            [
                gpu.host,
                str(gpu.index),
                gpu.name,
                unknown(gpu.utilization, "%"),
                f"{unknown(gpu.memory_used_mib, '')} / {unknown(gpu.memory_total_mib, ' MiB')}",
                gpu.source,
            ]
            for gpu in report.gpus
        ]
        sections.append(TableSection("GPUs", ["node", "GPU", "name", "busy", "memory used", "from"], rows))
    if report.failures:
        rows = [[f.target, str(f.stage), f.reason, f.hint or ""] for f in report.failures]
        sections.append(TableSection("Failed", ["who", "stage", "reason", "hint"], rows))
    return sections


def _age_range(ages: Sequence[float]) -> str:
    low, high = min(ages), max(ages)
    return f"{low:.1f}s ago" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f}s ago"


def unknown(value: Optional[int], unit: str) -> str:
    return "?" if value is None else f"{value}{unit}"
