"""`rankscope why` as text (pure): the verdict first, then the weaker hypotheses, every rank's
state, what each signal gave, notes and failures."""

from __future__ import annotations

from rankscope.why.report import CAUSE, NO_PROBLEM, NOTHING, PARTIAL, VICTIMS_ONLY, Hypothesis, WhyReport

_OUTCOME = {
    NO_PROBLEM: "No problem seen in the signals read (listed below)",
    NOTHING: "Nothing to judge: no job on this node and no input named or readable",
}


def hypothesis_lines(hypothesis: Hypothesis, indent: str) -> list[str]:
    lines = []
    if hypothesis.location:
        lines.append(f"{indent}where: {hypothesis.location}")
    width = max((len(e.source) for e in hypothesis.evidence), default=0)
    for evidence in hypothesis.evidence:
        lines.append(f"{indent}{evidence.source:<{width}}  {evidence.text}")
    if hypothesis.next_step:
        lines.append(f"{indent}next: {hypothesis.next_step}")
    return lines


def verdict_lines(report: WhyReport) -> list[str]:
    """The verdict as the report words it first: its sentence, where, each evidence line with its
    source, the next step; or what the outcome says when no cause is named."""
    verdict = report.verdict
    if verdict is not None and report.outcome == CAUSE:
        return [f"Verdict: {verdict.text}", *hypothesis_lines(verdict, "  ")]
    victims = next((n for n in report.notes if n.startswith(VICTIMS_ONLY)), None)
    if report.outcome == PARTIAL and victims is not None:
        return [f"No rank to blame: {victims}"]
    return [
        _OUTCOME.get(
            report.outcome,
            "Too little evidence to judge: the signals that failed or are absent are listed below",
        )
    ]


def render_text(report: WhyReport) -> str:
    lines: list[str] = []
    hosts = ", ".join(report.hosts)
    lines.append(f"rankscope why — {hosts} ({report.seconds:.1f} s)" if hosts else "rankscope why")
    lines.append("")
    lines.extend(verdict_lines(report))
    if report.hypotheses:
        lines += ["", "Other hypotheses (weaker last)"]
        for hypothesis in report.hypotheses:
            lines.append(f"  - {hypothesis.text}" + (f" [{hypothesis.kind}]" if hypothesis.kind else ""))
            lines.extend(hypothesis_lines(hypothesis, "      "))
    if report.ranks:
        lines += ["", "Ranks"]
        width = max(len(state.ranks) for state in report.ranks)
        for state in report.ranks:
            where = f"  ({', '.join(state.hosts)})" if len(report.hosts) > 1 and state.hosts else ""
            lines.append(f"  {state.ranks:>{width}}  {state.state}{where}")
    if report.signals:
        lines += ["", "Signals"]
        width = max(len(s.name) for s in report.signals)
        for signal in report.signals:
            lines.append(f"  {signal.name:<{width}}  {signal.state:<8}  {signal.detail}".rstrip())
    if report.notes:
        lines += ["", "Notes"]
        lines.extend(f"  {note}" for note in report.notes)
    if report.failures:
        lines += ["", "Failures"]
        lines.extend(
            f"  {f.target}: {f.reason}" + (f" — {f.hint}" if f.hint else "") for f in report.failures
        )
    return "\n".join(lines) + "\n"
