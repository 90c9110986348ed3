"""Text for a person: interfaces and advice, probe results, the reachability matrix (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from rankscope.net.master import MasterCheck
from rankscope.net.report import CheckReport, IfacesReport
from rankscope.net.verdicts import ProbeResult, Verdict

#: Matrix cells are short; the legend under it says what each means.
SHORT = {
    Verdict.OPEN: "open",
    Verdict.REFUSED: "refused",
    Verdict.FILTERED: "FILTERED",
    Verdict.UNRESOLVED: "NO-NAME",
    Verdict.NO_ROUTE: "NO-ROUTE",
    Verdict.ERROR: "ERROR",
}


def table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def render_ifaces(report: IfacesReport) -> str:
    rows = [["NAME", "KIND", "STATE", "MTU", "SPEED", "ADDRESSES"]]
    for i in report.interfaces:
        speed = (
            f"{i.speed_mbps // 1000}G" if i.speed_mbps and i.speed_mbps >= 1000 else str(i.speed_mbps or "-")
        )
        addresses = ", ".join(f"{a.address}/{a.prefixlen}" for a in i.addresses) or "-"
        rows.append([i.name, str(i.kind), i.operstate, str(i.mtu or "-"), speed, addresses])
    lines = [f"rankscope net ifaces: {report.host}", *table(rows)]
    ports = [p for i in report.interfaces for p in i.rdma] + list(report.rdma_only)
    if ports:
        lines += ["", "RDMA ports"]
        for p in ports:
            on = f" -> {', '.join(p.netdevs)}" if p.netdevs else " (no network interface)"
            rate = f", {p.rate}" if p.rate else ""
            lines.append(f"  {p.device} port {p.port}: {p.state or '?'}, {p.link_layer or '?'}{rate}{on}")
    rec = report.recommendation
    lines.append("")
    if rec.interface:
        lines.append(f"Use {rec.interface} for traffic between nodes: {rec.reason}")
        lines += [f"  {line}" for line in rec.exports()]
        if rec.alternatives:
            lines.append(f"  other candidates: {', '.join(rec.alternatives)}")
    else:
        lines.append(f"No interface to recommend: {rec.reason}")
    for finding in report.findings:
        lines += ["", f"WARNING: {finding.problem}", f"  fix: {finding.fix}"]
    return "\n".join(lines) + "\n"


def render_probes(results: Sequence[ProbeResult]) -> str:
    rows = [["TARGET", "ADDRESS", "VERDICT", "TIME", "DETAIL"]]
    for r in results:
        rows.append([r.target, r.address or "-", str(r.verdict), f"{r.elapsed:.3f}s", r.detail])
    lines = table(rows, "")
    seen: set[Verdict] = set()
    for r in results:
        if r.verdict is Verdict.OPEN or r.verdict in seen:
            continue
        seen.add(r.verdict)
        lines += ["", f"{r.verdict}: {r.meaning()}", f"  fix: {r.fix()}"]
    return "\n".join(lines) + "\n"


def render_matrix(report: CheckReport, window: float) -> str:
    matrix = report.matrix
    rows = [["from \\ to", *matrix.nodes]]
    for source in matrix.nodes:
        row = [source]
        for target in matrix.nodes:
            cell = matrix.cell(source, target)
            row.append("-" if cell is None or cell.verdict is None else SHORT[cell.verdict])
        rows.append(row)
    lines = [
        f"rankscope net check: port {matrix.port} between {len(matrix.nodes)} nodes (window {window:g}s)",
        *table(rows),
        "  (FILTERED: no answer, a firewall drops it; refused: reset, nothing listens; "
        "NO-NAME: does not resolve; NO-ROUTE: no route; -: not probed)",
    ]
    for node, reason in matrix.silent.items():
        lines.append(f"  {node} did not run the probes: {reason}")
    for node, error in report.listen_errors.items():
        lines.append(f"  {node} could not listen on {matrix.port}: {error}")
    if report.findings:
        lines += ["", "Findings"]
        for finding in report.findings:
            lines += [f"  {finding.problem}", f"    fix: {finding.fix}"]
    elif matrix.links():
        lines += ["", "Every node reaches every other node on this port, both ways."]
    return "\n".join(lines) + "\n"


def render_master(checks: Sequence[MasterCheck]) -> str:
    lines = []
    for check in checks:
        lines.append(f"{check.level:<4}  {check.what}")
        if check.fix:
            lines.append(f"      fix: {check.fix}")
    return "\n".join(lines) + "\n"
