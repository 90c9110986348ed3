"""The findings rankscope.logs.line_evidence reads in a log's text: one source, fed in one block."""

from __future__ import annotations

from rankscope.evidence import Finding
from rankscope.logs.line_evidence import LineEvidence


def line_findings(text: str, source: str = "job.log") -> list[Finding]:
    found = LineEvidence()
    found.start_source(source)
    data = text.encode()
    found.feed(data, data.count(b"\n"))
    return found.findings(set())
