"""The `rankscope` console entry: the command line every node of a multi-node `stacks` run gets,
without the command-line library; every other command line goes to click (rankscope.cli.main).

A multi-node run sends ``rankscope stacks --local --json ...`` to each node, derived from one
:class:`~rankscope.stacks.options.StacksOptions` (:meth:`~StacksOptions.to_argv`). That command line
is read back here by the same field metadata (:meth:`~StacksOptions.from_argv`) and runs the same
local pipeline (``report_local``) with the same document, so each node does not pay click's import
and the full command's (measured in docs/benchmarks.md). Anything else, a flag added by hand
included, takes the full path.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Optional, cast

if TYPE_CHECKING:
    from rankscope.cli.stacks import StacksRequest
    from rankscope.stacks.options import StacksOptions


class NodeRequest:
    """What ``stacks --local --json`` asks of the report: JSON on stdout, this node only; every other
    part of the full request (``--out``, ``--fr``, colours, ...) is off (None)."""

    as_json = True
    local = True

    def __getattr__(self, _name: str) -> Any:
        return None


def node_options(argv: list[str]) -> Optional[StacksOptions]:
    """The options of a node's ``stacks --local --json`` command line; None for any other (and for a
    combination the full command refuses: it says why)."""
    if argv[:3] != ["stacks", "--local", "--json"]:
        return None
    from rankscope.stacks.options import StacksOptions

    options = StacksOptions.from_argv(argv)
    if options is None or (
        options.via_signal and (options.native or options.native_all or options.with_locals)
    ):
        return None
    return options


def run_node(options: StacksOptions) -> int:
    """This node's stacks as the ``rankscope.stacks`` document on stdout; the exit code."""
    if options.slurm_job:
        from dataclasses import replace

        from rankscope.cluster.slurm_local import slurm_job_pids

        options = replace(options, pids=(*options.pids, *slurm_job_pids(options.slurm_job)))
    from rankscope.cli.stacks_report import report_local

    return report_local(options, cast("StacksRequest", NodeRequest()))


def main(argv: Optional[list[str]] = None) -> Any:
    options = node_options(list(sys.argv[1:] if argv is None else argv))
    if options is not None:
        from rankscope.cli.guard import run_guarded

        run_guarded(lambda: run_node(options))
    from rankscope.cli.main import main as full_main

    return full_main(argv)
