"""Every node's `why --local --json` answer joined into one pass (pure), as `stacks` merges nodes.

A node's stacks are relabelled with the node name and merged (rankscope.stacks.merge), its ranks'
compact flight recorders combined and aligned across nodes; the findings a node weighed from its own
signals (job output, kernel messages, ended ranks, crash dumps, cores: pids mean something only
there) are kept as the node gave them, their identity prefixed with the node. The head weighs them
all again with rankscope.evidence.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Optional

from rankscope.cluster.classify import NodeResult
from rankscope.logs.nccl_reason import CITED
from rankscope.model import Failure, NodeStatus, Stage
from rankscope.why.report import FAILED, READ, WhyReport, load_report
from rankscope.why.signals import Gathered
from rankscope.why.weigh import source_words

#: Findings the head derives again from the merged signals (the others are the node's own).
DERIVED = ("stacks", "flight recorders")


def parse_answer(result: NodeResult) -> tuple[NodeResult, Optional[WhyReport]]:
    """A node's answer: its why document, or its result with the reason it gave none."""
    if result.returncode is None:
        return result, None
    text = result.stdout.strip()
    try:
        report = load_report(json.loads(text.splitlines()[-1])) if text else None
    except (ValueError, IndexError):
        report = None
    if report is not None:
        return replace(result, stage=Stage.OK), report
    if result.returncode in (126, 127):
        return replace(result, stage=Stage.NO_RANKSCOPE, reason="rankscope not found there",
                       hint="--remote-rankscope PATH"), None  # fmt: skip
    last = (result.stderr.strip().splitlines() or [""])[-1]
    return replace(result, stage=Stage.COMMAND_FAILED, reason=f"exit {result.returncode}: {last}"[:300],
                   hint="run `rankscope why --local --json` there"), None  # fmt: skip


def nccl_cited(report: WhyReport) -> dict[tuple[str, str], list[str]]:
    """What NCCL said after an error, as the node's hypotheses cite it right after the error's own
    line (rankscope.logs.nccl_reason): (the error's source, its text) -> those lines."""
    out: dict[tuple[str, str], list[str]] = {}
    for hypothesis in [*([report.verdict] if report.verdict is not None else []), *report.hypotheses]:
        evidence = hypothesis.evidence
        for index, line in enumerate(evidence):
            said = []
            for after in evidence[index + 1 :]:
                if after.source != line.source or not after.text.startswith(CITED):
                    break
                said.append(after.text)
            if said and not line.text.startswith(CITED):
                out.setdefault((line.source, line.text), said)
    return out


def merge_answers(answers: Sequence[tuple[NodeResult, Optional[WhyReport]]]) -> Gathered:
    from rankscope.stacks.analyse import diagnose
    from rankscope.stacks.merge import merge_reports

    gathered = Gathered(merged=True)
    stacks = []
    records: list[Any] = []
    for result, report in answers:
        gathered.hosts.append(result.node)
        if report is None:
            gathered.failures.append(Failure(result.node, result.stage, result.reason, result.hint))
            gathered.signal(f"{result.node}", FAILED, f"[{result.stage.value}] {result.reason}")
            continue
        if report.stacks is not None:
            from rankscope.cluster.stacks_remote import relabel_host

            node_stacks = relabel_host(report.stacks, result.node)
            if node_stacks.fr_records is not None:
                records.append(node_stacks.fr_records)
            stacks.append(node_stacks)
        cited = nccl_cited(report)
        for finding in report.findings:
            if finding.source in DERIVED:
                continue
            who = f"{result.node}:{finding.who}" if finding.who and ":" not in finding.who else finding.who
            gathered.node_findings.append(
                replace(finding, who=who, source=f"{result.node}: {finding.source}")
            )
            said = cited.get((source_words(finding), finding.what))
            if said:
                gathered.log_reasons[(f"{result.node}: {finding.source}", finding.line)] = said
        for signal in report.signals:
            gathered.signal(f"{result.node}: {signal.name}", signal.state, signal.detail)
        for dead in report.dead:
            gathered.dead.append(replace(dead, host=result.node))
        gathered.kernel.extend(report.kernel)
        gathered.rank_files.extend(report.rank_files)
        gathered.cores.extend(report.cores)
        gathered.gpus.extend(replace(g, host=result.node) for g in report.gpus)
        gathered.logs.extend(f"{result.node}:{path}" for path in report.logs)
        gathered.notes.extend(f"{result.node}: {note}" for note in report.notes)
        gathered.failures.extend(replace(f, target=f"{result.node}: {f.target}") for f in report.failures)
    if stacks:
        merged = merge_reports(stacks)
        merged.fr_records = None
        merged.diagnosis = diagnose(merged)
        gathered.stacks = merged
        for process in merged.processes:
            if process.rank.rank is not None:
                gathered.pid_rank.setdefault(process.pid, process.rank.rank)
    if records:
        from rankscope.stacks.fr_live import combine, verdict

        live = verdict(combine(records))
        if not live.empty:
            gathered.fr = live
            gathered.signal("flight recorders (all nodes)", READ, live.headline)
    gathered.nodes = [NodeStatus(r.node, r.stage, r.returncode, r.reason, r.elapsed) for r, _ in answers]
    return gathered
