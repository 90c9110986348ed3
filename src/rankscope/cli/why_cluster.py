"""The multi-node branch of `rankscope why` (--hosts, --hostfile, --jobid): every node runs
``why --local --json`` (derived from the same WhyOptions), the answers are joined and weighed."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rankscope.cli.why import WhyRequest


def run_cluster_why(request: WhyRequest, started: float) -> int:
    from rankscope.cli.progress import tty_progress
    from rankscope.cli.why import finish
    from rankscope.cluster.run import run_remote
    from rankscope.lifetime import StopSignals
    from rankscope.why.nodes import merge_answers, parse_answer

    assert request.cluster is not None
    target = replace(request.cluster, overall_timeout=request.options.timeout + request.cluster.node_timeout)
    progress = tty_progress()
    try:
        with StopSignals() as stop:
            results = run_remote(target, request.node_argv(), progress, stop)
    finally:
        if progress is not None:
            progress.clear()
    gathered = merge_answers([parse_answer(result) for result in results])
    code = finish(request, gathered, started)
    if stop.signum:
        return 128 + stop.signum
    return code
