"""A :class:`DoctorReport` as a checklist for a person (pure)."""

from __future__ import annotations

from rankscope.doctor.report import DoctorReport, Status


def render(report: DoctorReport, verbose: bool = False) -> str:
    lines = [f"rankscope doctor: {report.host}"]
    width = max((len(check.name) for check in report.checks), default=0)
    for check in report.checks:
        lines.append(f"  {check.status:4}  {check.name:{width}}  {check.summary}")
        if check.fix and check.status in (Status.WARN, Status.FAIL):
            lines.append(f"  {'':4}  {'':{width}}  fix: {check.fix}")
        if verbose or check.status == Status.FAIL:
            lines += [f"  {'':4}  {'':{width}}    {line}" for line in check.detail]
    counts = ", ".join(f"{report.count(s)} {s}" for s in (Status.PASS, Status.WARN, Status.FAIL, Status.SKIP))
    lines.append(counts)
    return "\n".join(lines) + "\n"
