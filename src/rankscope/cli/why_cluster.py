"""The multi-node branch of `rankscope why` (--hosts, --hostfile, --jobid): every node runs
``why --local --json`` (derived from the same WhyOptions), the answers are joined and weighed."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rankscope.cli.why import WhyRequest
    from rankscope.why.signals import Gathered


def run_cluster_why(request: WhyRequest) -> tuple[Gathered, int]:
    """Every node's answer joined into one ``Gathered``, and the signal that stopped the run (0 if none):
    the caller weighs and reports it as it does a local run."""
    from rankscope.cli.progress import tty_progress
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
    return merge_answers([parse_answer(result) for result in results]), stop.signum or 0
