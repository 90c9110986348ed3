"""A culprit without a rank, named after the one process its launcher reports failed (pure).

Where a launcher prints its workers' output as it is (torchrun without --tee, DeepSpeed's launcher,
mpirun; over pdsh with only the node's name before each line), a worker's traceback or C++
exception carries no rank. When the log holds exactly one such culprit of a kind, and the launcher
(on that culprit's node, under a node prefix) reports exactly one process ending the way that kind
ends a process (an error code after a traceback, SIGABRT after an uncaught C++ exception), the
culprit is that process's: the global rank where the launcher names it (torchrun's summary, mpirun),
else the local rank its line names (``who``, as that line's own finding has it: ``3``, or
``worker-1:3`` under a node's prefix). Where the launcher restarted the workers, only the attempt
that ended the job is read (the findings not ``superseded``), and a traceback raised again in each
attempt counts once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Optional

from rankscope.evidence import Finding, Kind
from rankscope.logs.torchrun_summary import SUMMARY_SOURCE

#: Where a culprit of a cause is found (its own output), and how its launcher reports its death.
_OWN_OUTPUT = (Kind.TRACEBACK, Kind.CUT_TRACEBACK, Kind.EXCEPTION_LINE)
_REPORTS = {"python_exception": "tracebacks_elsewhere", "cpp_exception": "sigabrt"}
_LAUNCHERS = (Kind.LAUNCHER, Kind.LAUNCHER_SUMMARY)


def _node_label(who: str) -> bool:
    """A prefix that names a node, not a rank (pdsh's ``worker-1: ``): neither a number nor HOST:RANK."""
    return not who.isdigit() and ":" not in who and not who.startswith("rank")


def name_the_lone_failure(
    findings: list[Finding], cause: str, copies: Optional[Mapping[tuple[str, int], int]] = None
) -> list[Finding]:
    """``findings`` with the lone culprit of ``cause`` (``python_exception`` or ``cpp_exception``)
    named after its launcher's report, where the module's rule applies; else unchanged. ``copies``:
    how many tracebacks a finding stands for, by its (source, line) (one error printed by several
    processes without a prefix is one finding, and no one process's)."""
    # where the launcher restarted the workers, the attempt that ended the job (rankscope.evidence)
    live = [f for f in findings if not f.superseded] or findings
    culprits = [f for f in live if f.kind in _OWN_OUTPUT and f.role == "culprit" and f.cause == cause]
    if len(culprits) != 1 or culprits[0].global_rank is not None:
        return findings  # several, or its own words name its rank ([Rank N], a quoted error file)
    if (copies or {}).get((culprits[0].source, culprits[0].line), 1) > 1:
        return findings  # several processes printed it
    node = culprits[0].who
    if node is not None and not _node_label(node):
        return findings
    failed = [f for f in live if f.cause == _REPORTS[cause] and f.kind in _LAUNCHERS and f.who]
    if node is not None:
        failed = [f for f in failed if (f.who or "").startswith(f"{node}:")]
    summary = [f for f in failed if f.source == SUMMARY_SOURCE]
    chosen = summary or failed
    named = {f.who or "" for f in chosen}
    if len(named) != 1:
        return findings
    (who,) = named
    # torchrun's summary and mpirun name the global rank; torchrun's and DeepSpeed's lines a local one
    ranks = {f.global_rank for f in chosen}
    rank = ranks.pop() if len(ranks) == 1 else None
    local = rank is None and all(f.local for f in chosen)
    named_ranks = str(rank) if rank is not None else who  # its folded ranks were "-": no prefix named one
    return [
        replace(f, who=who, global_rank=rank, local=local, ranks=named_ranks) if f is culprits[0] else f
        for f in findings
    ]
