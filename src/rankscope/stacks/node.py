"""A node's answer to the head of a multi-node `rankscope stacks`: the raw material, not the report.

Every node of ``rankscope stacks --hosts ...`` runs ``stacks --local --json --node-answer ...``
(:meth:`~rankscope.stacks.options.StacksOptions.to_argv`). The node finds its processes and dumps
them as a run on one node does (:func:`rankscope.stacks.local.run_local` with ``raw``), and answers
with a ``rankscope.stacks.node/1`` document (docs/stacks.md, "What a node answers"):

- ``report``: the node's ``rankscope.stacks`` document without groups, states or diagnosis (its
  processes with their ranks, jobs, strays, failures with the node's own reasons and hints,
  progress markers, GPUs when a rank waits for one);
- ``dumps``: py-spy's own JSON of every dump that succeeded, by the name ``stacks --out`` gives it
  under ``raw/`` (``HOST.rank-R.pid-P[.sample-N].json``).

The head groups, diagnoses and renders once for every node (rankscope.cluster.node_answer, through
the same reading of raw dumps as ``stacks --from DIR``). So a node imports no grouping, diagnosis,
report text, in-process handler or flight-recorder code before or after its dumps: its CPU is
measured in docs/benchmarks.md ("Multi-node").

Where the raw answer cannot say it all, the node runs the full pipeline and answers with the whole
``rankscope.stacks`` document, which the head reads as before: ``--native`` (the representatives
are chosen from the groups), ``--via-signal``, more than :data:`RAW_SAMPLES_MAX` samples, and a
rank whose in-process handler gives its flight recorder (checked before any dump).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from rankscope.stacks.local import LocalResult, NeedsFullRun, process_started, run_local

if TYPE_CHECKING:
    from rankscope.lifetime import StopSignals
    from rankscope.stacks.collect import DumpOutcome
    from rankscope.stacks.options import StacksOptions

#: More samples than this answer with the whole document: a raw answer holds every sample's dumps
#: (a few KiB each), the whole document only the distinct stacks, and the fan-out keeps 16 MiB a node.
RAW_SAMPLES_MAX = 10


@dataclass
class NodeAnswer:
    """A node's raw answer (the module's text): what the head groups and diagnoses."""

    SCHEMA: ClassVar[str] = "rankscope.stacks.node/1"
    #: The node's ``rankscope.stacks`` document without groups, states or diagnosis.
    report: dict[str, Any] = field(default_factory=dict)
    #: py-spy's own JSON of every dump that succeeded, by its name under ``--out``'s ``raw/``.
    dumps: dict[str, str] = field(default_factory=dict)


def raw_name(outcome: DumpOutcome, sample: int, samples: int, kind: str = "") -> str:
    """The name ``stacks --out`` gives a dump under ``raw/`` (rankscope.stacks.saved.RAW_NAME), and a
    node's raw answer too: ``kind`` ``.native`` for a representative's native dump; a failed dump's
    reason is ``.error.txt``."""
    rank = outcome.target.rank.rank
    stem = f"{outcome.target.rank.host}.rank-{rank if rank is not None else 'none'}.pid-{outcome.target.pid}"
    stem += f".sample-{sample + 1}" if samples > 1 else ""
    return stem + kind + (".json" if outcome.snapshot is not None else ".error.txt")


def node_document(result: LocalResult) -> dict[str, Any]:
    """The ``rankscope.stacks.node/1`` document of a raw run."""
    from rankscope.serial import dump_document
    from rankscope.stacks.report import report_document  # imported while the dumps ran (AFTER_DUMPS_RAW)

    samples = result.report.samples
    dumps = {
        raw_name(outcome, sample, samples): outcome.raw.decode("utf-8", "replace")
        for sample, outcome in result.outcomes
        if outcome.snapshot is not None
    }
    return dump_document(NodeAnswer(report_document(result.report), dumps))


def collect_raw(options: StacksOptions, stop: Optional[StopSignals] = None) -> Optional[LocalResult]:
    """This node's raw run; None when only the full pipeline answers for it (see the module's text)."""
    if options.native or options.native_all or options.via_signal or options.samples > RAW_SAMPLES_MAX:
        return None
    try:
        return run_local(options, started=process_started(), stop=stop, raw=True)
    except NeedsFullRun:
        return None
