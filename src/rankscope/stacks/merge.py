"""Group equal stacks across ranks, merge nodes, and build the call tree (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Optional

from rankscope.model import Frame, Member, ProcessSnapshot
from rankscope.stacks.pyspy import thread_role
from rankscope.stacks.report import MOVING, STUCK, StackGroup, StacksReport

GroupKey = tuple[str, tuple[Frame, ...]]


def _sort_groups(groups: Iterable[StackGroup]) -> list[StackGroup]:
    """Main thread first, then largest group first, then by first rank."""

    def order(group: StackGroup) -> tuple[bool, int, int]:
        first = min((m.rank if m.rank is not None else m.pid) for m in group.members) if group.members else 0
        return (not group.is_main, -len(group.members), first)

    return sorted(groups, key=order)


def group_snapshots(snapshots: Iterable[ProcessSnapshot]) -> list[StackGroup]:
    """One group per distinct (thread role, frames); a process appears once per group."""
    groups: dict[GroupKey, StackGroup] = {}
    roles: dict[tuple[str, bool], str] = {}
    for snap in snapshots:
        member = Member(snap.rank.host, snap.pid, snap.rank.rank)
        for thread in snap.threads:
            role_key = (thread.name, thread.is_main)
            role = roles.get(role_key)
            if role is None:
                role = roles[role_key] = thread_role(thread.name, thread.is_main)
            key = (role, thread.frames)
            group = groups.get(key)
            if group is None:
                group = groups[key] = StackGroup(thread=role, is_main=thread.is_main, frames=thread.frames)
            members = group.members
            if not members or members[-1] is not member:
                members.append(member)
    return _sort_groups(groups.values())


def motion(samples: Sequence[Sequence[ProcessSnapshot]]) -> dict[int, str]:
    """pid -> stuck (main-thread stack identical in every sample) or moving."""
    seen: dict[int, set[tuple[Frame, ...]]] = {}
    counts: dict[int, int] = {}
    for sample in samples:
        for snap in sample:
            main = snap.main_thread
            seen.setdefault(snap.pid, set()).add(main.frames if main else ())
            counts[snap.pid] = counts.get(snap.pid, 0) + 1
    return {pid: (STUCK if len(stacks) == 1 else MOVING) for pid, stacks in seen.items() if counts[pid] > 1}


def merge_reports(reports: Sequence[StacksReport]) -> StacksReport:
    """Merge reports of several nodes (or runs) into one; equal stacks merge their members."""
    merged = StacksReport()
    groups: dict[GroupKey, StackGroup] = {}
    for report in reports:
        for group in report.groups:
            existing = groups.get(group.key)
            if existing is None:
                groups[group.key] = StackGroup(group.thread, group.is_main, group.frames, list(group.members))
            else:
                existing.members.extend(group.members)
        merged.processes.extend(report.processes)
        merged.failures.extend(report.failures)
        merged.jobs.extend(report.jobs)
        for host in report.hosts:
            if host not in merged.hosts:
                merged.hosts.append(host)
        merged.samples = max(merged.samples, report.samples)
        merged.interval = max(merged.interval, report.interval)
        merged.native = merged.native or report.native
        merged.seconds = max(merged.seconds, report.seconds)
    merged.groups = _sort_groups(groups.values())
    return merged


@dataclass
class TreeNode:
    """A chain of frames shared by exactly the same members, and the branches below it."""

    frames: list[Frame]
    members: list[Member]
    children: list[TreeNode] = field(default_factory=list)
    #: The group that ends exactly here (a leaf), if any.
    group: Optional[StackGroup] = None


def build_tree(groups: Sequence[StackGroup]) -> list[TreeNode]:
    """A prefix tree of the groups' stacks (outermost frame at the root), chains compressed."""

    def grow(items: list[tuple[StackGroup, int]]) -> list[TreeNode]:
        # items: (group, depth already consumed). Partition by the next frame.
        by_frame: dict[Optional[Frame], list[tuple[StackGroup, int]]] = {}
        for group, depth in items:
            nxt = group.frames[depth] if depth < len(group.frames) else None
            by_frame.setdefault(nxt, []).append((group, depth))
        nodes = []
        for frame, branch in by_frame.items():
            if frame is None:
                for group, _ in branch:
                    nodes.append(TreeNode(frames=[], members=list(group.members), group=group))
                continue
            # Extend the chain while every group in the branch shares the next frame.
            chain = [frame]
            depths = [d + 1 for _, d in branch]
            while True:
                nexts = {g.frames[d] if d < len(g.frames) else None for (g, _), d in zip(branch, depths)}
                nxt = nexts.pop() if len(nexts) == 1 else None
                if nxt is None:
                    break
                chain.append(nxt)
                depths = [d + 1 for d in depths]
            members = [m for g, _ in branch for m in g.members]
            node = TreeNode(frames=chain, members=members)
            rest = [(g, d) for (g, _), d in zip(branch, depths)]
            children = grow(rest)
            # A single leaf child with no frames is this chain's own end.
            if len(children) == 1 and not children[0].frames:
                node.group = children[0].group
            else:
                node.children = children
            nodes.append(node)
        nodes.sort(key=lambda n: -len(n.members))
        return nodes

    return grow([(g, 0) for g in groups])
