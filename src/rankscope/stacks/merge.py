"""Group equal stacks across ranks, merge nodes, and build the call tree (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Optional

from rankscope.jobkey import parse_key
from rankscope.model import Frame, Member, ProcessSnapshot, ThreadStack
from rankscope.stacks.pyspy import thread_role
from rankscope.stacks.report import MOVING, STUCK, JobInfo, StackGroup, StacksReport

GroupKey = tuple[str, tuple[Frame, ...]]


def _sort_groups(groups: Iterable[StackGroup]) -> list[StackGroup]:
    """Main thread first, then largest group first, then by first rank."""

    def order(group: StackGroup) -> tuple[bool, int, int]:
        first = min((m.rank if m.rank is not None else m.pid) for m in group.members) if group.members else 0
        return (not group.is_main, -len(group.members), first)

    return sorted(groups, key=order)


#: rankscope's own request thread in a rank with the in-process handler (docs/inproc.md): not the job's,
#: left out of the groups whichever way the stacks were taken.
HANDLER_THREAD = "rankscope-inproc"


def _is_handler_thread(thread: ThreadStack) -> bool:
    return (
        thread.name == HANDLER_THREAD
        and not thread.is_main
        and any(f.filename.endswith("rankscope/inproc/handler.py") for f in thread.frames)
    )


def group_snapshots(snapshots: Iterable[ProcessSnapshot]) -> list[StackGroup]:
    """One group per distinct (thread role, frames); a process appears once per group.

    rankscope's own handler thread (:data:`HANDLER_THREAD`) is left out.
    """
    groups: dict[GroupKey, StackGroup] = {}
    roles: dict[tuple[str, bool], str] = {}
    for snap in snapshots:
        member = Member(snap.rank.host, snap.pid, snap.rank.rank)
        for thread in snap.threads:
            if thread.name == HANDLER_THREAD and _is_handler_thread(thread):
                continue
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


#: `stacks --native` dumps natively this many processes of each group of equal Python stacks (all of a smaller group).
REPRESENTATIVES = 2


def _order_key(snap: ProcessSnapshot) -> tuple[int, int]:
    return (snap.rank.rank if snap.rank.rank is not None else snap.pid, snap.pid)


def representatives(snapshots: Iterable[ProcessSnapshot], per_group: int = REPRESENTATIVES) -> list[int]:
    """The pids to dump natively: the first ``per_group`` (by rank) of each group of processes
    whose main threads have the same Python stack."""
    groups: dict[tuple[Frame, ...], list[ProcessSnapshot]] = {}
    for snap in snapshots:
        main = snap.main_thread
        groups.setdefault(main.frames if main else (), []).append(snap)
    chosen: list[int] = []
    for members in groups.values():
        chosen.extend(s.pid for s in sorted(members, key=_order_key)[:per_group])
    return chosen


def python_frames(frames: Iterable[Frame]) -> tuple[Frame, ...]:
    return tuple(f for f in frames if not f.is_native)


def _lent(thread: ThreadStack, frames: tuple[Frame, ...]) -> ThreadStack:
    """``thread`` (Python frames only) with ``frames`` (the same Python frames, native ones between)."""
    local_vars = None
    if thread.locals is not None:
        python_locals = iter(thread.locals)
        local_vars = tuple(None if f.is_native else next(python_locals, None) for f in frames)
    return replace(thread, frames=frames, locals=local_vars)


def lend_native(
    snapshots: Sequence[ProcessSnapshot], native: Mapping[int, ProcessSnapshot]
) -> list[ProcessSnapshot]:
    """Every process's snapshot with native frames: its own native dump (a representative), else its
    Python dump in which each thread takes the native frames of the representatives' threads of the
    same role and the same Python frames, where those representatives agree on them. A thread no
    representative matches (or that they disagree on) keeps its Python frames."""
    frames_of: dict[tuple[str, tuple[Frame, ...]], set[tuple[Frame, ...]]] = {}
    for snap in native.values():
        for thread in snap.threads:
            key = (thread_role(thread.name, thread.is_main), python_frames(thread.frames))
            frames_of.setdefault(key, set()).add(thread.frames)
    out: list[ProcessSnapshot] = []
    for snap in snapshots:
        own = native.get(snap.pid)
        if own is not None:
            out.append(own)
            continue
        threads = []
        for thread in snap.threads:
            found = frames_of.get((thread_role(thread.name, thread.is_main), thread.frames))
            threads.append(_lent(thread, next(iter(found))) if found and len(found) == 1 else thread)
        out.append(replace(snap, threads=threads))
    return out


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
        if report.strays:
            merged.strays = [*(merged.strays or []), *report.strays]
        for host in report.hosts:
            if host not in merged.hosts:
                merged.hosts.append(host)
        merged.samples = max(merged.samples, report.samples)
        merged.interval = max(merged.interval, report.interval)
        merged.native = merged.native or report.native
        merged.seconds = max(merged.seconds, report.seconds)
        if report.gpus:
            merged.gpus = [*(merged.gpus or []), *report.gpus]
    merged.groups = _sort_groups(groups.values())
    merged.mixed_jobs = mixed_jobs(merged.jobs)
    return merged


def mixed_jobs(jobs: Sequence[JobInfo]) -> Optional[dict[str, list[str]]]:
    """Each host's job keys when two nodes' jobs conflict (rankscope.jobkey); ``None`` when they agree."""
    keyed = [(job.host, parse_key(job.key)) for job in jobs if job.key]
    clash = any(a_host != b_host and a.conflicts(b) for a_host, a in keyed for b_host, b in keyed)
    if not clash:
        return None
    out: dict[str, list[str]] = {}
    for job in jobs:
        keys = out.setdefault(job.host, [])
        if job.key and job.key not in keys:
            keys.append(job.key)
    return out


def job_reports(report: StacksReport) -> list[tuple[Optional[JobInfo], StacksReport]]:
    """The report cut into one report per job of one node (``report.several_jobs()``), each with
    only its processes and their groups, and last the processes of no job (``None``), if any.
    Failures stay in ``report``: they are listed once, after every job."""
    parts: list[tuple[Optional[JobInfo], StacksReport]] = []
    taken: set[int] = set()
    jobs: list[Optional[JobInfo]] = [j for j in report.jobs if j.pids]
    for job in [*jobs, None]:
        pids = (set(job.pids) if job is not None else {p.pid for p in report.processes}) - taken
        if job is None and not pids:
            break
        taken |= pids
        groups = []
        for group in report.groups:
            members = [m for m in group.members if m.pid in pids]
            if members:
                groups.append(StackGroup(group.thread, group.is_main, group.frames, members))
        part = replace(
            report,
            groups=_sort_groups(groups),
            processes=[p for p in report.processes if p.pid in pids],
            failures=[],
            jobs=[job] if job is not None else [],
            diagnosis=None,
        )
        parts.append((job, part))
    return parts


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
