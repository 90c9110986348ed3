"""Format a stacks report as text a person reads top-down (formatting only)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Optional, Union

from rankscope.folding import RankSet, describe_members, duration, fold_hosts
from rankscope.model import Frame, Member
from rankscope.stacks.analyse import diagnose
from rankscope.stacks.frames import (
    describe_frame,
    explaining_frames,
    is_anonymous,
    is_comm,
    is_library,
    locate,
)
from rankscope.stacks.merge import REPRESENTATIVES, TreeNode, build_tree, job_reports
from rankscope.stacks.report import (
    MOVING,
    STUCK,
    Diagnosis,
    JobInfo,
    StackGroup,
    StacksReport,
    StepInfo,
    StrayInfo,
)

Style = Callable[..., str]

#: Says something more about the ranks of one stack group (``rankscope stacks --fr``: their last collective).
GroupNote = Callable[[Sequence[Member]], str]


def _plain(text: str, **_: object) -> str:
    return text


def _package(frame: Frame) -> str:
    if frame.is_native:
        return "native code"
    short = frame.short_filename
    return short.split("/", 1)[0] if "/" in short else "the standard library"


@dataclass(frozen=True)
class FoldedRun:
    """Three or more library frames in a row, shown as one line (``… 5 frames in torch``)."""

    frames: tuple[Frame, ...]

    @property
    def text(self) -> str:
        packages = sorted({_package(f) for f in self.frames})
        return f"… {len(self.frames)} frames in {', '.join(packages)}"


def fold_frames(frames: Sequence[Frame], full: bool) -> list[Union[Frame, FoldedRun]]:
    """Frames outermost first as the text report shows them: runs of 3+ library frames folded.

    Without ``full``: anonymous native frames (``?? (libc.so.6)``) are left out, the native frames
    that say why a stack waits are kept (frames.explaining_frames). With ``full`` every frame is kept.
    """
    if full:
        return list(frames)
    frames = [f for f in frames if not is_anonymous(f)]
    keep = explaining_frames(frames)
    for index, frame in enumerate(frames):
        if not is_library(frame) or index == len(frames) - 1 or is_comm(frame) and not frame.is_native:
            keep.add(index)
    shown: list[Union[Frame, FoldedRun]] = []
    index = 0
    while index < len(frames):
        if index in keep:
            shown.append(frames[index])
            index += 1
            continue
        run_end = index
        while run_end < len(frames) and run_end not in keep:
            run_end += 1
        run = frames[index:run_end]
        shown.extend(run if len(run) <= 2 else [FoldedRun(tuple(run))])
        index = run_end
    return shown


def _frame_lines(frames: Sequence[Frame], full: bool, style: Style) -> list[str]:
    """Frames outermost first (:func:`fold_frames`); C++ names are shortened unless ``full``."""
    lines: list[str] = []
    for item in fold_frames(frames, full):
        if isinstance(item, FoldedRun):
            lines.append(style(item.text, dim=True))
            continue
        text = describe_frame(item, not full)
        if is_comm(item):
            text = style(text, fg="yellow")
        elif not is_library(item):
            text = style(text, bold=True)
        lines.append(text)
    return lines


def _state_tag(members: Sequence[Member], states: dict[Member, Optional[str]]) -> str:
    values = [states.get(m) for m in members]
    stuck = values.count(STUCK)
    moving = values.count(MOVING)
    if not stuck and not moving:
        return ""
    if stuck == len(values):
        return " [stuck]"
    if moving == len(values):
        return " [moving]"
    return f" [{stuck} stuck, {moving} moving]"


def _step_tag(members: Sequence[Member], steps: dict[Member, StepInfo], multi_host: bool) -> str:
    """`` · step 5 phase=train``, or `` · at different steps: step 1: rank 0; step 2: ranks 1-2``."""
    marked = {m: steps[m] for m in members if m in steps}
    if not marked:
        return ""
    texts: dict[str, list[Member]] = {}
    for member, info in marked.items():
        texts.setdefault(info.text() or "no step", []).append(member)
    unmarked = [m for m in members if m not in steps]
    if len(texts) == 1 and not unmarked:
        return f" · {next(iter(texts))}"
    by_step: dict[Optional[int], list[Member]] = {}
    for member, info in marked.items():
        by_step.setdefault(info.step, []).append(member)
    parts = [
        f"{'step ' + str(step) if step is not None else 'no step'}: {describe_members(group, with_hosts=multi_host)}"
        for step, group in sorted(by_step.items(), key=lambda item: (item[0] is None, item[0] or 0))
    ]
    if unmarked:
        parts.append(f"no marker: {describe_members(unmarked, with_hosts=multi_host)}")
    lead = "at different steps" if len(by_step) > 1 else "steps"
    return f" · {lead}: " + "; ".join(parts)


def _render_tree(
    nodes: Sequence[TreeNode],
    full: bool,
    style: Style,
    states: dict[Member, Optional[str]],
    multi_host: bool,
    prefix: str = "  ",
    top: bool = True,
    steps: Optional[dict[Member, StepInfo]] = None,
    group_note: Optional[GroupNote] = None,
) -> list[str]:
    lines: list[str] = []
    for position, node in enumerate(nodes):
        last = position == len(nodes) - 1
        if top:
            head, body = prefix, prefix + "  "
        else:
            head = prefix + ("└─ " if last else "├─ ")
            body = prefix + ("   " if last else "│  ")
        who = describe_members(node.members, with_hosts=multi_host)
        tag = _state_tag(node.members, states) if not node.children else ""
        if steps and not node.children:
            tag += style(_step_tag(node.members, steps, multi_host), fg="magenta")
        extra = group_note(node.members) if group_note is not None and not node.children else ""
        lines.append(
            head + style(who, fg="cyan", bold=True) + tag + (style(f" — {extra}", dim=True) if extra else "")
        )
        for text in _frame_lines(node.frames, full, style):
            lines.append(body + "  " + text)
        if node.children:
            lines.extend(
                _render_tree(
                    node.children,
                    full,
                    style,
                    states,
                    multi_host,
                    body,
                    top=False,
                    steps=steps,
                    group_note=group_note,
                )
            )
    return lines


def _thread_roles(groups: Sequence[StackGroup]) -> dict[str, list[StackGroup]]:
    roles: dict[str, list[StackGroup]] = {}
    for group in groups:
        roles.setdefault(group.thread, []).append(group)
    return roles


def _native_line(report: StacksReport) -> str:
    """Which processes were dumped natively: every one (--native-all) or representatives (--native)."""
    dumped = [p for p in report.processes if p.dumped]
    native = [p.member for p in dumped if p.native]
    multi_host = len(report.hosts) > 1
    if not native:
        return "native frames: none (every native dump failed)"
    if len(native) == len(dumped):
        return f"native frames: every process dumped natively ({describe_members(native, with_hosts=multi_host)})"
    return (
        f"native frames: {describe_members(native, with_hosts=multi_host)} dumped natively, the first "
        f"{REPRESENTATIVES} of each distinct Python stack; the others show their representatives' native "
        "frames (--native-all dumps every rank)"
    )


def _job_title(job: Optional[JobInfo], part: StacksReport) -> str:
    """``torchrun pid 4242: ranks 0-3, world size 4, 4 of 4 processes dumped``."""
    name = job.describe() if job is not None else "processes of no job"
    ranks = sorted({p.rank.rank for p in part.processes if p.rank.rank is not None})
    sizes = sorted({p.rank.world_size for p in part.processes if p.rank.world_size})
    facts = []
    if ranks:
        facts.append(RankSet.of(ranks).phrase())
    if sizes:
        facts.append(f"world size {'/'.join(str(s) for s in sizes)}")
    dumped = sum(1 for p in part.processes if p.dumped)
    facts.append(f"{dumped} of {len(part.processes)} processes dumped")
    return f"{name}: {', '.join(facts)}"


def _body(
    report: StacksReport,
    diagnosis: Diagnosis,
    full: bool,
    style: Style,
    states: dict[Member, Optional[str]],
    group_note: Optional[GroupNote] = None,
) -> list[str]:
    """The diagnosis, the main-thread tree and the other threads of one report (or one job of it)."""
    multi_host = len(report.hosts) > 1
    lines: list[str] = []
    lines.append("")
    lines.append(style("Diagnosis", bold=True, underline=True))
    if diagnosis.findings:
        for finding in diagnosis.findings:
            color_name = "red" if finding.kind == "elsewhere" and diagnosis.divergent else None
            lines.append("  " + style(finding.text, fg=color_name, bold=finding.kind == "elsewhere"))
    else:
        lines.append("  " + diagnosis.headline)
    for note in diagnosis.notes:
        lines.append("  " + style("note: ", fg="yellow") + note)

    main = report.main_groups()
    if main:
        lines.append("")
        lines.append(
            style(
                f"Main thread — {len(main)} distinct stack{'s' if len(main) != 1 else ''}",
                bold=True,
                underline=True,
            )
        )
        steps = {p.member: p.progress for p in report.processes if p.progress is not None}
        lines.extend(
            _render_tree(
                build_tree(main), full, style, states, multi_host, steps=steps, group_note=group_note
            )
        )

    others = report.other_groups()
    if others:
        lines.append("")
        lines.append(style("Other threads", bold=True, underline=True))
        for role, groups in _thread_roles(others).items():
            if len(groups) == 1:
                group = groups[0]
                place = locate(group.frames)
                frame = place.caller or place.innermost
                if place.collective:
                    spot = place.text()
                else:
                    spot = describe_frame(frame) if frame else "no frames"
                who = describe_members(group.members, with_hosts=multi_host)
                lines.append(f"  {role} — {who}: {spot}")
            else:
                lines.append(f"  {role} — {len(groups)} distinct stacks")
                lines.extend(_render_tree(build_tree(groups), full, style, states, multi_host, prefix="    "))

    return lines


def render_text(
    report: StacksReport,
    diagnosis: Diagnosis,
    full: bool = False,
    color: bool = False,
    title: str = "",
    subtitle: str = "",
    above: Sequence[str] = (),
    group_note: Optional[GroupNote] = None,
) -> str:
    """``above``: lines put before the diagnosis (a desync verdict); ``group_note``: words after each main-thread group."""
    style: Style = _plain
    if color:  # only for a terminal: `--json` and piped reports never pay for importing click
        import click

        style = click.style
    states: dict[Member, Optional[str]] = (
        {p.member: p.state for p in report.processes if p.state} if report.samples > 1 else {}
    )
    dumped = sum(1 for p in report.processes if p.dumped)
    lines: list[str] = []
    what = title or ", ".join(j.describe() for j in report.jobs if j.launcher_pid or j.pids) or "processes"
    if not title and report.several_jobs():
        what = f"{sum(1 for j in report.jobs if j.pids)} jobs ({what})"
    sample_text = f"{report.samples} samples {report.interval:g}s apart" if report.samples > 1 else "1 sample"
    lines.append(
        style(
            f"rankscope stacks: {what}" + (f" on {fold_hosts(report.hosts)}" if report.hosts else ""),
            bold=True,
        )
        + f" — {dumped} of {len(report.processes)} processes dumped, {sample_text}, took {duration(report.seconds)}s"
    )
    if subtitle:
        lines.append(subtitle)
    if report.mixed_jobs:
        lines.append(style(f"warning: {mixed_jobs_text(report.mixed_jobs)}", fg="red", bold=True))
    if report.several_jobs():
        lines.append(
            f"{sum(1 for j in report.jobs if j.pids)} jobs on this node, each in its own section; "
            "to look at one: rankscope stacks --pid LAUNCHER_PID (or each rank's --pid)"
        )
    if report.native:
        lines.append(_native_line(report))
    if above:
        lines.append("")
        lines.extend(style(line, bold=True) if index == 0 else line for index, line in enumerate(above))
    if report.several_jobs():
        for job, part in job_reports(report):
            lines.append("")
            lines.append(style(f"── {_job_title(job, part)} ──", bold=True))
            job_diagnosis = job.diagnosis if job is not None and job.diagnosis else diagnose(part)
            lines.extend(_body(part, job_diagnosis, full, style, states, group_note))
    else:
        lines.extend(_body(report, diagnosis, full, style, states, group_note))

    if report.strays:
        lines.append("")
        lines.append(
            style(f"Not part of any job ({len(report.strays)}, not dumped)", bold=True, underline=True)
        )
        for stray in report.strays:
            lines.append(f"  {stray_text(stray, multi_host=len(report.hosts) > 1)}")
        lines.append("  " + style("dump one with: rankscope stacks --pid PID", dim=True))

    if report.failures:
        lines.append("")
        lines.append(style(f"Failed ({len(report.failures)})", bold=True, underline=True, fg="red"))
        for failure in report.failures:
            text = f"  {failure.target} [{failure.stage}] {failure.reason}"
            if failure.hint:
                text += style(f" — {failure.hint}", dim=True)
            lines.append(text)
    return "\n".join(lines) + "\n"


def stray_text(stray: StrayInfo, multi_host: bool = False) -> str:
    """``pid 4711 (uid 1001): rank 0, world size 1, no launcher — python serve.py``."""
    where = f"{stray.host} " if multi_host else ""
    inside = f", {stray.ns_pid} in its container" if stray.ns_pid is not None else ""
    owner = f"uid {stray.uid}" if stray.uid is not None else "owner unknown"
    facts = [f"rank {stray.rank}" if stray.rank is not None else "no rank"]
    if stray.world_size is not None:
        facts.append(f"world size {stray.world_size}")
    facts.append("no launcher")
    return f"{where}pid {stray.pid} ({owner}{inside}): {', '.join(facts)} — {stray.cmdline}"


def mixed_jobs_text(mixed: dict[str, list[str]]) -> str:
    """The nodes answered for different jobs: which node has which job key."""
    parts = [f"{', '.join(keys) or 'no key'} on {host}" for host, keys in mixed.items()]
    return (
        "the nodes answered for different jobs (" + "; ".join(parts) + "): the stacks below mix them; "
        "name the job on each node with --pid, or narrow --hosts"
    )
