"""What one `rankscope stacks` command line asks for (:class:`StacksRequest`), without click.

The full command (rankscope.cli.stacks) reads every command line into a request with click. A
run on this node with nothing but options click reads the same way (:func:`read_plain`: `stacks`,
`stacks --pid P --json`, a node's `stacks --local --json ...` that
:meth:`~rankscope.stacks.options.StacksOptions.to_argv` wrote) is read here instead, by the same
field metadata, so its dumps start without click's import (the console entry, rankscope.cli.node;
measured in docs/benchmarks.md). Anything else (``--help``, ``--out``, nodes, a value click would
refuse or read differently) returns None and goes to click.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Optional

from rankscope.cmdline import FLAG, from_flags
from rankscope.stacks.options import NODE_ANSWER, StacksOptions

if TYPE_CHECKING:  # the fan-out machinery is imported only when nodes are named
    from pathlib import Path

    from rankscope.cluster.run import ClusterTarget


@dataclass(frozen=True)
class StacksRequest:
    """Everything one `rankscope stacks` command line asks for."""

    options: StacksOptions
    #: The nodes to run on; None for a run on this node only (no --hosts/--hostfile/--jobid, or --local).
    cluster: Optional[ClusterTarget] = None
    as_json: bool = False
    out_dir: Optional[Path] = None
    #: --force: write into a non-empty --out directory.
    force: bool = False
    full: bool = False
    local: bool = False
    color: Optional[bool] = None
    remote_rankscope: str = "rankscope"
    #: --node-python: the nodes run rankscope's Python command, not the sh collector (rankscope.stacks.shell_node).
    node_python: bool = False
    #: --from DIR: re-analyse a directory `stacks --out` wrote instead of collecting.
    from_dir: Optional[Path] = None
    #: --fr DUMPS: flight-recorder dumps whose desync verdict goes above the stack groups.
    fr: Optional[Path] = None
    #: --html FILE: also write the report as a page; --folded: print collapsed stacks instead.
    html: Optional[Path] = None
    folded: bool = False
    #: --node-answer (with --local --json): answer a multi-node run's head with the raw material
    #: (rankscope.stacks.node), not the report.
    node_answer: bool = False

    def node_argv(self) -> list[str]:
        """The command line every node of a multi-node run gets, derived from :attr:`options`."""
        from rankscope.cli.cluster_options import node_argv

        assert self.cluster is not None
        return node_argv(self.remote_rankscope, self.options, self.cluster)


#: The bounds of the numeric options, both ends included: whole numbers (lowest, highest) and
#: seconds (lowest). click's ranges in rankscope.cli.stacks are built from these tables, so both
#: readers refuse the same values.
COUNTS: dict[str, tuple[int, int]] = {"samples": (1, 1000), "parallelism": (1, 256)}
LOWEST_SECONDS: dict[str, float] = {"interval": 0, "timeout": 0.1, "deadline": 0.1}

#: The flags of a plain run beyond the options' own: flag -> (request field, value).
PLAIN_FLAGS: dict[str, tuple[str, bool]] = {
    "--json": ("as_json", True),
    "--local": ("local", True),
    "--full": ("full", True),
    "--color": ("color", True),
    "--no-color": ("color", False),
    NODE_ANSWER: ("node_answer", True),
}


def read_plain(argv: list[str]) -> Optional[StacksRequest]:
    """``stacks`` on this node with only :data:`PLAIN_FLAGS` and the options' own flags, each as a
    separate word, every value within bounds (:func:`within_bounds`): the request click would read from it. None
    for any other command line (click reads it, and says what is wrong with it)."""
    if argv[:1] != ["stacks"]:
        return None
    takes_value = {
        spec.metadata[FLAG]
        for spec in fields(StacksOptions)
        if FLAG in spec.metadata and not isinstance(spec.default, bool)
    }
    given: dict[str, Any] = {}
    flags: list[str] = []
    words = iter(argv[1:])
    for word in words:
        if word in PLAIN_FLAGS:
            name, value = PLAIN_FLAGS[word]
            given[name] = value
        elif word in takes_value:
            value_word = next(words, None)
            if value_word is None or value_word.startswith("-"):
                return None  # click reads "--pid -5" and reports a missing value itself
            flags += [word, value_word]
        else:
            flags.append(word)
    values = from_flags(StacksOptions, flags)
    if values is None or not within_bounds(values):
        return None
    options = StacksOptions(**values)
    if options.via_signal and (options.native or options.native_all or options.with_locals):
        return None  # a usage error: click says it
    return StacksRequest(options, **given)


def within_bounds(values: dict[str, Any]) -> bool:
    """Every bounded value a finite number within :data:`COUNTS` and :data:`LOWEST_SECONDS` (click decides
    the others)."""
    bounds: dict[str, tuple[float, float]] = {
        **COUNTS,
        **{k: (v, math.inf) for k, v in LOWEST_SECONDS.items()},
    }
    return all(
        values.get(name) is None or (math.isfinite(values[name]) and low <= values[name] <= high)
        for name, (low, high) in bounds.items()
    )


def run_here(request: StacksRequest) -> int:
    """Collect on this node (the processes of ``--slurm-job`` added to the targets), print the
    report; the exit code (docs/exit-codes.md)."""
    options = request.options
    if options.slurm_job:
        from rankscope.cluster.slurm_local import slurm_job_pids

        options = replace(options, pids=(*options.pids, *slurm_job_pids(options.slurm_job)))
    if request.node_answer and request.local and request.as_json:
        from rankscope.cli.stacks_node import answer_head

        code = answer_head(options)  # None: a run only the full pipeline does (--native, live recorders)
        if code is not None:
            return _pruned_after(code)
    from rankscope.cli.stacks_report import report_local

    return _pruned_after(report_local(options, request))


def _pruned_after(code: int) -> int:
    """The caller's runtime directory pruned once a day, after the report is out (never before the
    first dump: rankscope.cli.daily_prune)."""
    from rankscope.cli.daily_prune import after_report

    after_report()
    return code
