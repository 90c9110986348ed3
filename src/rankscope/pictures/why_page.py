"""A `why` report as a page: the verdict as the text report words it, the weaker hypotheses, the
merged call tree of its stacks with the culprit ranks in red, the flight recorders, every rank's
state, progress steps, GPUs, and what each signal gave (pure).

The pictures of the signals are the other adapters' (``stacks_sections``, ``fr_section``): a why
page draws the same tree as ``stacks --html`` of the same stacks, its culprits those of why's verdict.
"""

from __future__ import annotations

from dataclasses import replace

from rankscope.folding import RankSet
from rankscope.model import Member
from rankscope.pictures.fr_page import fr_section
from rankscope.pictures.page import Page, TableSection
from rankscope.pictures.stacks_page import stacks_sections, unknown
from rankscope.stacks.report import Diagnosis, StacksReport
from rankscope.why.render import hypothesis_lines, render_text, verdict_lines
from rankscope.why.report import CAUSE, GpuFacts, WhyReport


def why_page(report: WhyReport, full: bool = False) -> Page:
    page = Page(
        title="rankscope why",
        subtitle=render_text(report).split("\n", 1)[0],
        verdict=verdict_lines(report),
    )
    if report.hypotheses:
        page.sections.append(_hypotheses(report))
    culprits = culprit_ranks(report)
    if report.stacks is not None and report.stacks.groups:
        page.sections.extend(
            stacks_sections(
                _stacks(report.stacks, report), _diagnosis(report.stacks, culprits), full, "the verdict"
            )
        )
    if report.fr is not None and report.fr.groups:
        page.sections.append(fr_section(report.fr))
    if report.ranks:
        rows = [[state.ranks, state.state, ", ".join(state.hosts)] for state in report.ranks]
        page.sections.append(TableSection("Ranks, merged by equal state", ["ranks", "state", "nodes"], rows))
    if report.gpus:
        page.sections.append(_gpus(report.gpus))
    if report.signals:
        rows = [[s.name, s.state, s.detail] for s in report.signals]
        page.sections.append(TableSection("Signals: what each one gave", ["signal", "state", "detail"], rows))
    if report.failures:
        rows = [[f.target, str(f.stage), f.reason, f.hint or ""] for f in report.failures]
        page.sections.append(TableSection("Failed", ["who", "stage", "reason", "hint"], rows))
    page.notes = list(report.notes)
    return page


def culprit_ranks(report: WhyReport) -> list[int]:
    """The ranks the verdict names (none when no cause is named)."""
    if report.verdict is None or report.outcome != CAUSE:
        return []
    return sorted(set(report.verdict.ranks))


def _diagnosis(stacks: StacksReport, culprits: list[int]) -> Diagnosis:
    """The culprits as the stacks pictures mark them: the processes of the verdict's ranks."""
    named = set(culprits)
    members: list[Member] = [p.member for p in stacks.processes if p.member.rank in named]
    return Diagnosis(headline="", divergent=members)


def _stacks(stacks: StacksReport, report: WhyReport) -> StacksReport:
    """Stacks without what the why page shows from why's own report (its GPU facts, its failures)."""
    return replace(stacks, failures=[], gpus=None if report.gpus else stacks.gpus)


def _hypotheses(report: WhyReport) -> TableSection:
    rows = []
    for hypothesis in report.hypotheses:
        rows.append(
            [
                hypothesis.text,
                hypothesis.kind,
                str(RankSet.of(hypothesis.ranks)) if hypothesis.ranks else "",
                "\n".join(hypothesis_lines(hypothesis, "")),
            ]
        )
    return TableSection(
        "Other hypotheses (weaker last)",
        ["hypothesis", "evidence kind", "ranks", "where, evidence, next"],
        rows,
    )


def _gpus(gpus: list[GpuFacts]) -> TableSection:
    rows = [
        [
            gpu.host,
            str(gpu.index),
            gpu.name,
            unknown(gpu.utilization, "%"),
            unknown(gpu.memory_used_mib, " MiB"),
            unknown(gpu.ecc_uncorrected, ""),
            ", ".join(str(pid) for pid in gpu.pids),
            gpu.source,
        ]
        for gpu in gpus
    ]
    return TableSection(
        "GPUs", ["node", "GPU", "name", "busy", "memory used", "ECC uncorrected", "processes", "from"], rows
    )
