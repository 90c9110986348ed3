"""`rankscope stacks --local --json --node-answer`: what every node of a multi-node run prints.

The raw answer (rankscope.stacks.node): the node's processes, failures and py-spy's own dumps, one
line of JSON; the head groups, diagnoses and renders. The exit code is the one a node's
``stacks --local --json`` gives (docs/exit-codes.md: 3 no job, 5 every dump failed, 6 no py-spy,
7 ptrace refused), except that ranks the job's size says are missing do not make it 4: the head
judges those over every node.
"""

from __future__ import annotations

import sys
from typing import Optional

from rankscope.lifetime import StopSignals
from rankscope.stacks.node import collect_raw, node_document
from rankscope.stacks.options import StacksOptions


def answer_head(options: StacksOptions) -> Optional[int]:
    """Print this node's raw answer; its exit code. None when only the full pipeline answers (the
    caller runs it: the whole `rankscope.stacks` document, which the head reads too)."""
    with StopSignals() as stop:
        result = collect_raw(options, stop)
    if result is None:
        return None
    import json  # after the dumps, as the exit codes are

    from rankscope.cli.outcome import exit_code, stopped_exit_code

    report = result.report
    dumped = sum(1 for p in report.processes if p.dumped)
    code = exit_code(len(report.processes), dumped, report.failures)
    sys.stdout.write(json.dumps(node_document(result), separators=(",", ":")) + "\n")
    sys.stdout.flush()
    if stop.signum:
        sys.stderr.write(f"rankscope: interrupted by {stop.name}: the answer covers what was collected\n")
        return stopped_exit_code(stop.signum)
    return int(code)
