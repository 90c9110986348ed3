"""`rankscope why` on a node with several jobs: each collected and weighed alone
(rankscope.why.several), shown one after the other, the strongest verdict first (docs/why.md,
"Several jobs on one node")."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rankscope.cli.why import WhyRequest
    from rankscope.why.several import JobTarget
    from rankscope.why.signals import Gathered


def several_jobs(request: WhyRequest) -> list[JobTarget]:
    """The node's jobs when `why` looks for "the job on this node" and finds several (each is weighed
    apart: rankscope.why.several); [] otherwise, and where a bundle, a page or folded stacks is asked
    for (one job's: those weigh what they find together, and a note says so)."""
    options = request.options
    if options.pids or options.slurm_job or options.post_mortem_only or request.local and request.as_json:
        return []
    if request.out_dir is not None or request.html is not None or request.folded:
        return []
    from rankscope.why.several import jobs_here

    targets = jobs_here()
    return targets if len(targets) > 1 else []


def show_each(
    request: WhyRequest, targets: list[JobTarget], collected: list[tuple[JobTarget, Gathered]], started: float
) -> int:
    """Text: a line naming the jobs, then each job's report under its name. JSON: the strongest job's
    document, with ``job`` naming it and ``other_jobs`` holding the others' documents. Exit code: the
    strongest job's."""
    from rankscope.why.render import render_text
    from rankscope.why.report import exit_code, report_document
    from rankscope.why.several import headline, strongest_first
    from rankscope.why.weigh import weigh

    seconds = time.monotonic() - started
    reports = strongest_first([(target, weigh(gathered, seconds)) for target, gathered in collected])
    if not reports:
        sys.stderr.write("rankscope: interrupted before any job was looked at\n")
        return 4
    if request.as_json:
        documents: list[dict[str, Any]] = []
        for target, report in reports:
            document = report_document(report)
            document["job"] = target.name
            documents.append(document)
        first = documents[0]
        first["notes"] = [headline(targets), *first.get("notes", [])]
        first["other_jobs"] = documents[1:]
        sys.stdout.write(json.dumps(first, indent=2) + "\n")
    else:
        sys.stdout.write(f"rankscope why: {headline(targets)}\n")
        for target, report in reports:
            sys.stdout.write(f"\n── {target.name} ──\n\n{render_text(report)}")
    sys.stdout.flush()
    return exit_code(reports[0][1])
