"""Text for the numerics results (pure): what ``str()`` of a result shows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the results' __str__ imports this module: only their types here, no cycle
    from rankscope.numerics.report import (
        Anomaly,
        Comparison,
        LeafDiff,
        ModuleComparison,
        ModuleRow,
        TensorDiff,
        TensorStats,
    )

#: Parameters listed by name before "... and N more".
SHOWN = 4


def _g(value: float) -> str:
    return f"{value:.3g}"


def _value(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.10g}"


def _tolerance(leaf: LeafDiff) -> str:
    if leaf.rtol == 0 and leaf.atol == 0:
        return "exact (rtol=0, atol=0)"
    return f"rtol={_g(leaf.rtol)}, atol={_g(leaf.atol)}"


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def _verdict(leaf: LeafDiff) -> str:
    if leaf.problem:
        return f"MISMATCH, cannot compare element-wise: {leaf.problem}"
    return (
        f"{'ok' if leaf.ok else 'MISMATCH'}, {leaf.mismatched} of {leaf.total} elements "
        f"({_percent(leaf.mismatched, leaf.total)}) outside {_tolerance(leaf)}"
    )


def _detail_lines(leaf: LeafDiff, comparison: Comparison, indent: str) -> list[str]:
    if leaf.problem or not leaf.total:
        return []
    if not leaf.max_abs_diff:
        return [f"{indent}every element equal"]
    reference, other = leaf.worst_values
    return [
        f"{indent}greatest absolute difference {_g(leaf.max_abs_diff)} at index {leaf.worst_index}: "
        f"{_value(reference)} ({comparison.reference.label}) vs {_value(other)} ({comparison.other.label})",
        f"{indent}greatest relative difference {_g(leaf.max_rel_diff)} at index {leaf.rel_worst_index}",
    ]


def render_comparison(comparison: Comparison) -> str:
    sides = f"{comparison.reference.label} (reference) vs {comparison.other.label}"
    if len(comparison.leaves) == 1 and not comparison.leaves[0].path:
        leaf = comparison.leaves[0]
        return "\n".join([f"{sides}: {_verdict(leaf)}", *_detail_lines(leaf, comparison, "  ")])
    lines = [
        f"{sides}: {'ok' if comparison.ok else 'MISMATCH'}, {comparison.mismatched} of {comparison.total} "
        f"elements in {len(comparison.leaves)} outputs outside tolerance"
    ]
    for leaf in comparison.leaves:
        lines.append(f"  output{leaf.path}: {_verdict(leaf)}")
        lines += _detail_lines(leaf, comparison, "    ")
    return "\n".join(lines)


def _tensor_line(item: TensorDiff) -> str:
    leaf = item.diff
    if leaf.problem:
        return f"  {item.name}: {leaf.problem}"
    return (
        f"  {item.name}: {leaf.mismatched} of {leaf.total} elements differ, greatest absolute difference "
        f"{_g(leaf.max_abs_diff)} at {leaf.worst_index} ({_value(leaf.worst_values[0])} vs {_value(leaf.worst_values[1])})"
    )


def _row(row: ModuleRow) -> str:
    name = "  " * row.depth + (row.name or "(model)")
    if row.total == 0:
        return f"  {name:<36} {row.type:<22} {'-':>10} {'-':>10}  -"
    verdict = "ok" if row.ok else ("DIVERGES (starts here)" if row.starts_here else "diverges")
    return f"  {name:<36} {row.type:<22} {_g(row.max_abs):>10} {_g(row.max_rel):>10}  {verdict}"


def render_modules(result: ModuleComparison) -> str:
    sides = f"{result.reference.label} (reference) vs {result.other.label}"
    tolerance = (
        result.tolerance_words or "the dtypes' default tolerances"
        if result.rtol is None or result.atol is None
        else (
            "exact"
            if result.rtol == 0 and result.atol == 0
            else f"rtol={_g(result.rtol)}, atol={_g(result.atol)}"
        )
    )
    lines = [f"{sides}, {tolerance}"]
    lines.append(
        f"after construction: {len(result.param_mismatches)} of {result.params_compared} parameters and "
        f"{len(result.buffer_mismatches)} of {result.buffers_compared} buffers differ"
    )
    if result.buffer_mismatches:
        lines.append("buffers that differ (computed when the model was built):")
        lines += [_tensor_line(item) for item in result.buffer_mismatches]
    if result.param_mismatches:
        lines.append("parameters that differ:")
        lines += [_tensor_line(item) for item in result.param_mismatches[:SHOWN]]
        if len(result.param_mismatches) > SHOWN:
            lines.append(f"  ... and {len(result.param_mismatches) - SHOWN} more")
    if result.copied:
        lines.append(
            f"copied from the reference before the forward pass: {len(result.copied)} tensors of its state_dict"
        )
    lines.append("")
    lines.append(f"  {'module (call order)':<36} {'type':<22} {'max abs':>10} {'max rel':>10}  verdict")
    lines += [_row(row) for row in result.rows]
    lines.append("")
    if result.first_divergent is None:
        lines.append("every module's output is within tolerance")
    else:
        first = result.first_divergent or "(model)"
        if result.first_introduced == result.first_divergent:
            lines.append(f"first divergent module: {first} (its inputs agree: the divergence starts in it)")
        else:
            lines.append(f"first divergent module: {first}")
            if result.first_introduced is None:
                lines.append(
                    "no module has agreeing inputs and a diverging output: the inputs already differ"
                )
            else:
                lines.append(
                    f"the divergence starts in: {result.first_introduced or '(model)'} (its inputs agree)"
                )
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def _stats(stats: TensorStats) -> str:
    if stats.count == 0:
        return "-"
    span = (
        "no finite value"
        if stats.abs_min is None
        else f"|x| {_g(stats.abs_min)} .. {_g(stats.abs_max or 0.0)}"
    )
    return span + (f", {stats.nonfinite} inf/nan" if stats.nonfinite else "")


def render_anomaly(anomaly: Anomaly) -> str:
    where = "output" if anomaly.phase == "forward" else "gradient for its inputs"
    head = f"{anomaly.kind} first in the {where} of {anomaly.name or '(model)'} ({anomaly.type}), " + (
        f"forward pass {anomaly.pass_index}"
        if anomaly.phase == "forward"
        else f"backward of forward pass {anomaly.pass_index}"
    )
    if anomaly.entered:
        head += "; its inputs already held inf/NaN (they entered there, not produced by a watched module)"
    lines = [
        head,
        f"the last {len(anomaly.history)} module calls ({anomaly.phase}; |x| of the finite values):",
    ]
    gradients = anomaly.phase == "backward"
    for index, step in enumerate(anomaly.history):
        marker = ">" if index == len(anomaly.history) - 1 else " "
        lines.append(f" {marker} {step.name or '(model)'} ({step.type})")
        for label, stats in (
            ("grad out" if gradients else "inputs", step.inputs),
            ("params", step.params),
            ("grad in" if gradients else "outputs", step.outputs),
        ):
            lines.append(f"      {label + ':':<10} {_stats(stats)}")
    return "\n".join(lines)
