"""Fold identical node outputs into one block, like ClusterShell's clubak, and list failed nodes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from rankscope.cluster.fanout import OK, NodeResult
from rankscope.cluster.targets import fold


@dataclass(frozen=True)
class OutputGroup:
    """Nodes that printed exactly the same stdout and exited the same way."""

    nodes: tuple[str, ...]
    returncode: Optional[int]
    output: str

    @property
    def nodeset(self) -> str:
        return fold(self.nodes)


@dataclass(frozen=True)
class FailureGroup:
    nodes: tuple[str, ...]
    stage: str
    reason: str
    hint: str

    @property
    def nodeset(self) -> str:
        return fold(self.nodes)


def group_outputs(results: Sequence[NodeResult]) -> list[OutputGroup]:
    """Nodes that ran the command, grouped by (output, exit code); biggest group first."""
    buckets: dict[tuple[str, Optional[int]], list[str]] = {}
    for result in results:
        if result.returncode is None:
            continue
        buckets.setdefault((result.stdout, result.returncode), []).append(result.node)
    groups = [OutputGroup(tuple(nodes), rc, out) for (out, rc), nodes in buckets.items()]
    return sorted(groups, key=lambda g: (-len(g.nodes), g.returncode or 0, g.nodeset))


def group_failures(results: Sequence[NodeResult]) -> list[FailureGroup]:
    """Nodes that did not end ``ok``, grouped by (stage, reason)."""
    buckets: dict[tuple[str, str, str], list[str]] = {}
    for result in results:
        if result.stage == OK:
            continue
        buckets.setdefault((result.stage, result.reason, result.hint), []).append(result.node)
    return [
        FailureGroup(tuple(nodes), stage, reason, hint) for (stage, reason, hint), nodes in buckets.items()
    ]


def render_groups(results: Sequence[NodeResult]) -> str:
    """Text for a person: one block per distinct output, then every failed node with its stage."""
    lines: list[str] = []
    for group in group_outputs(results):
        title = f"{group.nodeset} ({len(group.nodes)})"
        if group.returncode:
            title += f" exit {group.returncode}"
        rule = "-" * max(15, len(title))
        lines += [rule, title, rule]
        body = group.output.rstrip("\n")
        lines += body.splitlines() if body else ["(no output)"]
    failures = group_failures(results)
    if failures:
        total = sum(len(f.nodes) for f in failures)
        lines += ["", f"Failed nodes ({total} of {len(results)}):"]
        for failure in failures:
            line = f"  {failure.nodeset}  {failure.stage}: {failure.reason}"
            lines.append(line)
            if failure.hint:
                lines.append(f"      hint: {failure.hint}")
    return "\n".join(lines) + "\n"


def results_to_json(results: Sequence[NodeResult]) -> dict[str, Any]:
    return {
        "schema": "rankscope.exec/1",
        "nodes": [
            {
                "node": r.node,
                "stage": r.stage,
                "returncode": r.returncode,
                "stdout": r.stdout,
                "stderr": r.stderr,
                "reason": r.reason,
                "hint": r.hint,
                "elapsed": round(r.elapsed, 3),
            }
            for r in results
        ],
        "groups": [
            {"nodes": g.nodeset, "count": len(g.nodes), "returncode": g.returncode, "output": g.output}
            for g in group_outputs(results)
        ],
        "failures": [
            {"nodes": f.nodeset, "count": len(f.nodes), "stage": f.stage, "reason": f.reason, "hint": f.hint}
            for f in group_failures(results)
        ],
    }
