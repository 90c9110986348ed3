"""A `net check` report as a page: the findings as the text report words them, the matrix as a heatmap (pure)."""

from __future__ import annotations

from rankscope.net.render import SHORT, render_matrix
from rankscope.net.report import CheckReport
from rankscope.net.verdicts import MEANING, Verdict
from rankscope.pictures.page import HeatmapSection, Page


def net_page(report: CheckReport, window: float) -> Page:
    matrix = report.matrix
    text = render_matrix(report, window).rstrip("\n").split("\n")
    header = text[0]
    blank = text.index("") if "" in text else len(text)
    verdict = [line.strip() for line in text[blank + 1 :] if line.strip() and line != "Findings"]
    cells = []
    for source in matrix.nodes:
        row = []
        for target in matrix.nodes:
            cell = matrix.cell(source, target)
            row.append("" if cell is None or cell.verdict is None else SHORT[cell.verdict])
        cells.append(row)
    used = {word for row in cells for word in row}
    legend = {
        SHORT[v]: MEANING[v][0].format(host="the target", port=matrix.port)
        for v in Verdict
        if SHORT[v] in used
    }
    if "" in used:
        legend[""] = "not probed (the source node did not run the probes)"
    page = Page(title="rankscope net check", subtitle=header, verdict=verdict or ["no link was probed"])
    page.sections.append(
        HeatmapSection(
            title=f"Who reaches whom on port {matrix.port} (row: from, column: to)",
            rows=list(matrix.nodes),
            columns=list(matrix.nodes),
            cells=cells,
            legend=legend,
            good=SHORT[Verdict.OPEN],
        )
    )
    page.notes = [f"{node} did not run the probes: {reason}" for node, reason in matrix.silent.items()]
    page.notes += [
        f"{node} could not listen on {matrix.port}: {error}" for node, error in report.listen_errors.items()
    ]
    return page
