"""Say in words where the ranks are: who waits in which collective, who is elsewhere, the notes on
steps, GPUs and ranks not found (pure; the frames' words are :mod:`rankscope.stacks.frames`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from rankscope.folding import RankSet, describe_members
from rankscope.model import Frame, Member, RankId
from rankscope.stacks.frames import Place, locate
from rankscope.stacks.merge import job_reports
from rankscope.stacks.report import Diagnosis, Finding, GpuStatus, StackGroup, StacksReport


def _finding(kind: str, members: list[Member], place: Place, text: str) -> Finding:
    ranks = str(RankSet.of(m.rank for m in members if m.rank is not None))
    return Finding(
        kind, ranks, members, place.collective, place.caller, place.innermost, text, place.gpu_call
    )


def _findings(groups: Sequence[StackGroup]) -> list[tuple[Place, list[Member]]]:
    """Merge groups that are at the same place (they may differ in deeper library frames)."""
    places: dict[tuple[Optional[str], Optional[Frame], Optional[Frame]], tuple[Place, list[Member]]] = {}
    for group in groups:
        place = locate(group.frames)
        key = (place.collective, place.caller, None if place.collective else place.innermost)
        if key in places:
            places[key][1].extend(group.members)
        else:
            places[key] = (place, list(group.members))
    ordered = sorted(places.values(), key=lambda pm: (-len(pm[1]), min(_order(m) for m in pm[1])))
    return ordered


def _order(member: Member) -> int:
    return member.rank if member.rank is not None else member.pid


def _missing(report: StacksReport) -> list[int]:
    sizes = {p.rank.world_size for p in report.processes if p.rank.world_size}
    if len(sizes) != 1:
        return []
    world = sizes.pop()
    if world is None or world > 1_000_000:
        return []
    # a rank stopped before rankscope looked (SIGSTOP) is there, not dumped: its own note says so
    present = {
        p.rank.rank for p in report.processes if (p.dumped or p.was_stopped) and p.rank.rank is not None
    }
    return [r for r in range(world) if r not in present]


def diagnose(report: StacksReport) -> Diagnosis:
    """Who waits where, and who is elsewhere. Several jobs of one node are diagnosed apart (each
    job's ``diagnosis``); the one returned then joins theirs, each sentence under its job's name."""
    if not report.several_jobs():
        return _diagnose(report)
    joined = Diagnosis("")
    headlines = []
    for job, part in job_reports(report):
        diagnosis = _diagnose(part)
        name = job.describe() if job is not None else "processes of no job"
        if job is not None:
            job.diagnosis = diagnosis
        headlines.append(f"{name}: {diagnosis.headline}")
        joined.findings.extend(diagnosis.findings)
        joined.divergent.extend(diagnosis.divergent)
        joined.missing_ranks.extend(r for r in diagnosis.missing_ranks if r not in joined.missing_ranks)
        joined.notes.extend(f"{name}: {note}" for note in diagnosis.notes)
    joined.headline = " | ".join(headlines)
    joined.missing_ranks.sort()
    joined.__post_init__()
    return joined


def _diagnose(report: StacksReport) -> Diagnosis:
    multi_host = len({m.host for g in report.groups for m in g.members}) > 1

    def who(members: Sequence[Member]) -> str:
        return describe_members(members, with_hosts=multi_host)

    notes: list[str] = []
    for proc in report.processes:
        if proc.was_stopped:
            notes.append(
                f"{who([proc.member])} (pid {proc.pid}) was already stopped (SIGSTOP) before rankscope looked: "
                f"that alone hangs the job; resume it with kill -CONT {proc.pid}"
            )
        if proc.resumed:
            notes.append(f"pid {proc.pid} was left stopped by its dump; rankscope sent SIGCONT")
        if proc.retries and proc.dumped:
            tries = "retry" if proc.retries == 1 else "retries"
            notes.append(
                f"{who([proc.member])} (pid {proc.pid}) was dumped after {proc.retries} {tries}: "
                f"{proc.held_by or 'another tracer'} held it at first"
            )
    by_signal = [p.member for p in report.processes if p.via == "signal"]
    if by_signal:
        notes.append(
            f"{who(by_signal)} {'were' if len(by_signal) > 1 else 'was'} dumped through the in-process handler "
            "(a request to its own thread, no ptrace): Python frames only, function names without their class"
        )
    newer = [p for p in report.processes if p.handler_version is not None]
    if newer:
        from rankscope.stacks.inproc_request import version_note  # threading and the handler: only then

        notes.append(
            f"{who([p.member for p in newer])}: {version_note(max(p.handler_version or 0 for p in newer))}"
        )
    missing = _missing(report)
    if missing:
        notes.append(
            f"{_ranks(missing)} of world size {len(missing) + len(_present(report))} "
            f"{'were' if len(missing) > 1 else 'was'} not found: "
            "exited, on a node not examined, or failed to dump (see failures)"
        )
    places = _findings(report.main_groups())
    if not places:
        headline = "no stacks were collected" + (
            f"; {len(report.failures)} target{'s' if len(report.failures) > 1 else ''} failed (listed below)"
            if report.failures
            else ""
        )
        return Diagnosis(headline, missing_ranks=missing, notes=notes)
    if len(places) == 1:
        place, members = places[0]
        plural = _plural(members)
        if not plural:
            text = f"{who(members)} {place.text(plural=False)}"
        else:
            everyone = f"all {len(members)} {'processes' if members[0].rank is None else 'ranks'}"
            text = f"{everyone} ({who(members)}) {place.text()}"
        finding = _finding("together", members, place, text)
        if place.collective:
            text += (
                f". Nobody here is elsewhere: the rank {'they wait' if plural else 'it waits'} for is missing "
                "or on another node, or the collective itself is stuck in the network "
                "(check the other nodes with --hosts; NCCL_DEBUG=INFO)"
            )
        if missing:
            text += f"; missing: {_ranks(missing)}"
        notes.extend(gpu_notes(report, [finding], who))
        notes.extend(step_notes(report, [finding], who))
        return Diagnosis(text, [finding], [], missing, notes)

    waiting = [(p, m) for p, m in places if p.collective]
    elsewhere = [(p, m) for p, m in places if not p.collective]
    findings: list[Finding] = []
    divergent: list[Member] = []
    if waiting and elsewhere:
        for place, members in waiting:
            findings.append(
                _finding("waiting", members, place, f"{who(members)} {place.text(_plural(members))}")
            )
        for place, members in elsewhere:
            text = f"{who(members)} {place.elsewhere(_plural(members))}"
            findings.append(_finding("elsewhere", members, place, text))
            divergent.extend(members)
    else:
        (major_place, major), *minor = places
        kind = "waiting" if waiting else "elsewhere"
        # as many ranks in two collectives (rank 0 in send, rank 1 in recv; two pipeline stages): no
        # majority says which side called the wrong one, so none is singled out
        tie = bool(waiting) and len(minor[0][1]) == len(major)
        findings.append(
            _finding(kind, major, major_place, f"{who(major)} {major_place.text(_plural(major))}")
        )
        for place, members in minor:
            plural = _plural(members)
            verb = place.text(plural) if waiting else place.elsewhere(plural)
            findings.append(_finding(kind, members, place, f"{who(members)} {verb}"))
            if not tie:
                divergent.extend(members)
        if tie:
            notes.append(
                "the ranks are in different collectives or call sites, no more of them in one than in another: "
                "a mismatched collective call, with no majority to tell which side is off"
            )
        elif waiting:
            notes.append("the ranks are in different collectives or call sites: a mismatched collective call")
    headline = "; ".join(f.text for f in findings)
    notes.extend(gpu_notes(report, findings, who))
    notes.extend(step_notes(report, findings, who))
    return Diagnosis(headline, findings, divergent, missing, notes)


def steps_of(members: Sequence[Member], report: StacksReport) -> dict[int, list[Member]]:
    """The members that record a step (rankscope.progress), by step, lowest first."""
    step = {p.member: p.progress.step for p in report.processes if p.progress is not None}
    by_step: dict[int, list[Member]] = {}
    for member in members:
        value = step.get(member)
        if value is not None:
            by_step.setdefault(value, []).append(member)
    return dict(sorted(by_step.items()))


def step_notes(
    report: StacksReport, findings: Sequence[Finding], who: Callable[[Sequence[Member]], str]
) -> list[str]:
    """Ranks at one place but at different steps: the same line in different iterations of the loop.

    Sets ``finding.steps`` of each such finding.
    """
    notes = []
    for finding in findings:
        by_step = steps_of(finding.members, report)
        if len(by_step) < 2:
            continue
        finding.steps = {str(step): who(members) for step, members in by_step.items()}
        parts = "; ".join(f"step {step}: {who(members)}" for step, members in by_step.items())
        behind = next(iter(by_step.values()))
        verb = "are" if _plural(behind) else "is"
        notes.append(
            f"{who(finding.members)} are at the same place but at different steps ({parts}): the same line in "
            f"different iterations of the loop; {who(behind)} {verb} behind. In a collective, that is a "
            "desync: the ranks behind skipped a collective the others made (or the others made an extra one)"
        )
    return notes


#: GPU notes printed at most; more ranks waiting for their GPUs are counted.
GPU_NOTES = 8


def device_of(rank: Optional[RankId], gpus: Sequence[GpuStatus]) -> Optional[GpuStatus]:
    """The GPU a rank uses: the one numbered as its local rank (``torch.cuda.set_device(LOCAL_RANK)``),
    else the node's only GPU; None when neither says."""
    if rank is not None and rank.local_rank is not None:
        for gpu in gpus:
            if gpu.index == rank.local_rank:
                return gpu
    return gpus[0] if len(gpus) == 1 else None


def gpu_text(gpu: GpuStatus) -> str:
    """``GPU 0 (NVIDIA H100 80GB HBM3): 100% busy, 1234 of 81559 MiB used (nvidia-smi)`` and what it means."""
    facts = []
    if gpu.utilization is not None:
        facts.append(f"{gpu.utilization}% busy")
    if gpu.memory_used_mib is not None and gpu.memory_total_mib is not None:
        facts.append(f"{gpu.memory_used_mib} of {gpu.memory_total_mib} MiB used")
    text = (
        f"GPU {gpu.index}" + (f" ({gpu.name})" if gpu.name else "") + ": " + (", ".join(facts) or "no data")
    )
    text += f" ({gpu.source})"
    if gpu.utilization is not None and gpu.utilization >= 90:
        text += "; a kernel is running: one that never ends keeps its GPU at 100%"
    elif gpu.utilization == 0:
        text += "; no kernel ran in the last sample period: the GPU itself is idle"
    return text


def gpu_notes(
    report: StacksReport, findings: Sequence[Finding], who: Callable[[Sequence[Member]], str]
) -> list[str]:
    """One note per rank that waits for its GPU, with that GPU's utilisation and memory where known."""
    if not report.gpus:
        return []
    ranks = {p.member: p.rank for p in report.processes}
    by_host: dict[str, list[GpuStatus]] = {}
    for status in report.gpus:
        by_host.setdefault(status.host, []).append(status)
    notes = []
    waiting = [m for f in findings if f.gpu_wait for m in f.members]
    for member in waiting:
        gpu = device_of(ranks.get(member), by_host.get(member.host, []))
        if gpu is not None:
            notes.append(f"{who([member])} waits for {gpu_text(gpu)}")
    if len(notes) > GPU_NOTES:
        notes[GPU_NOTES:] = [f"... and {len(notes) - GPU_NOTES} more ranks waiting for their GPUs"]
    return notes


def _plural(members: Sequence[Member]) -> bool:
    """Whether ``describe_members`` names more than one (``ranks 1-2``, ``pids 41,57``, ``rank 0 + pid 7``)."""
    return len({m.rank for m in members if m.rank is not None}) + sum(m.rank is None for m in members) > 1


def _ranks(ranks: Sequence[int]) -> str:
    return RankSet.of(ranks).phrase()


def not_found_here(report: StacksReport, missing: Sequence[int]) -> list[int]:
    """The missing ranks that belong on the nodes examined: vanished, not merely elsewhere.

    With one local world size L for every rank (torchrun, mpirun by slot), rank r runs on node r // L;
    a rank of a node no process was found on is on a node not examined, and does not count. Without
    L every missing rank counts.
    """
    ranked = [p.rank for p in report.processes if p.rank.rank is not None]
    sizes = {r.local_world_size for r in ranked}
    local = sizes.pop() if len(sizes) == 1 else None
    if not local:
        return list(missing)
    nodes = {r.rank // local for r in ranked if r.rank is not None}
    return [r for r in missing if r // local in nodes]


def _present(report: StacksReport) -> set[int]:
    return {p.rank.rank for p in report.processes if p.dumped and p.rank.rank is not None}
