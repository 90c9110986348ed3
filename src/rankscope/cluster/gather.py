"""Fold identical node outputs into one block, like ClusterShell's clubak, and list failed nodes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from rankscope.cluster.classify import NodeResult
from rankscope.cluster.targets import fold
from rankscope.model import Stage
from rankscope.serial import dump_document


@dataclass(frozen=True)
class OutputGroup:
    """Nodes (folded: ``node[01-04]``) that printed exactly the same stdout and exited the same way."""

    nodes: str
    count: int
    returncode: Optional[int]
    output: str


@dataclass(frozen=True)
class FailureGroup:
    """Nodes (folded) that stopped at the same stage for the same reason."""

    nodes: str
    count: int
    stage: Stage
    reason: str
    hint: str


@dataclass
class ExecResult:
    """What ``rankscope exec --json`` prints (schema ``rankscope.exec/1``)."""

    SCHEMA: ClassVar[str] = "rankscope.exec/1"

    nodes: list[NodeResult]
    groups: list[OutputGroup]
    failures: list[FailureGroup]


def group_outputs(results: Sequence[NodeResult]) -> list[OutputGroup]:
    """Nodes that ran the command, grouped by (output, exit code); biggest group first."""
    buckets: dict[tuple[str, Optional[int]], list[str]] = {}
    for result in results:
        if result.returncode is None:
            continue
        buckets.setdefault((result.stdout, result.returncode), []).append(result.node)
    groups = [OutputGroup(fold(nodes), len(nodes), rc, out) for (out, rc), nodes in buckets.items()]
    return sorted(groups, key=lambda g: (-g.count, g.returncode or 0, g.nodes))


def group_failures(results: Sequence[NodeResult]) -> list[FailureGroup]:
    """Nodes that did not end ``ok``, grouped by (stage, reason, hint)."""
    buckets: dict[tuple[Stage, str, str], list[str]] = {}
    for result in results:
        if result.stage is Stage.OK:
            continue
        buckets.setdefault((result.stage, result.reason, result.hint), []).append(result.node)
    return [
        FailureGroup(fold(nodes), len(nodes), stage, reason, hint)
        for (stage, reason, hint), nodes in buckets.items()
    ]


def render_groups(results: Sequence[NodeResult]) -> str:
    """Text for a person: one block per distinct output, then every failed node with its stage."""
    lines: list[str] = []
    for group in group_outputs(results):
        title = f"{group.nodes} ({group.count})"
        if group.returncode:
            title += f" exit {group.returncode}"
        rule = "-" * max(15, len(title))
        lines += [rule, title, rule]
        body = group.output.rstrip("\n")
        lines += body.splitlines() if body else ["(no output)"]
    failures = group_failures(results)
    if failures:
        total = sum(f.count for f in failures)
        lines += ["", f"Failed nodes ({total} of {len(results)}):"]
        for failure in failures:
            lines.append(f"  {failure.nodes}  {failure.stage}: {failure.reason}")
            if failure.hint:
                lines.append(f"      hint: {failure.hint}")
    return "\n".join(lines) + "\n"


def results_to_json(results: Sequence[NodeResult]) -> dict[str, Any]:
    """The ``rankscope.exec/1`` document: every node, the output groups, the failure groups."""
    document = ExecResult(list(results), group_outputs(results), group_failures(results))
    return dump_document(document)
