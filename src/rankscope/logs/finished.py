"""A node whose ranks all finished while the others still ran (pure): torchrun's agent says so.

torchrun's agent writes, when every worker of its node exited 0 (``api.py``, torch 1.9 to 2.13),
at its INFO level (``LOGLEVEL=INFO``)::

    I0412 21:44:51.904000 3820 torch/distributed/elastic/agent/server/api.py:879] [default] worker group successfully finished. Waiting 300 seconds for other agents to finish.
    INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.
    ... api.py:932] Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish

and at its default level only when the wait at the exit barrier (reached after that) fails, as it
does when another node's agent, which holds the rendezvous store, ended with its failed ranks
(measured on a real 2-node torchrun job of torch 2.13 on gloo)::

    E1127 12:55:53.760000 19607 torch/distributed/elastic/agent/server/api.py:1008] Error waiting on exit barrier. Elapsed: 0.62 seconds

A job whose ranks on another node then fail only as victims (a collective that lost its peer:
``ncclRemoteError``, ``Connection closed by peer``, a timeout) lost them to this node's ranks
returning from their main early: a step, a save or an evaluation that only some ranks run
(``if is_main: trainer.save_model()`` under FSDP, seen in a public thread), or uneven data. No
launcher reports an exit 0, so this line is the only trace of it; it is a lead, not a culprit (kind
``launcher_summary``, role ``handled``): a node that finished at the end of a healthy job says the
same words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from rankscope.evidence import HANDLED, Finding, Kind

FINISHED = "workers_finished"
NEEDLES = (
    b"worker group successfully finished",
    b"(WorkerState.SUCCEEDED)",
    b"Error waiting on exit barrier",
)


def finished_finding(who: Optional[str], source: str, line: int, order: int) -> Finding:
    """torchrun's word that every worker of its node (``who``, when its line has a prefix) exited 0."""
    where = f" on {who}" if who else ""
    return Finding(
        Kind.LAUNCHER_SUMMARY,
        FINISHED,
        HANDLED,
        who,
        f"torchrun{where}: its worker group finished (every rank of its node exited 0)",
        None,
        source,
        line,
        order,
    )


def finished_early(findings: Sequence[Finding]) -> list[Finding]:
    """torchrun's reports of a node whose ranks all finished, where every error of the log is a
    consequence (no culprit) and some rank's error is a victim's; else none."""
    if any(f.role == "culprit" and not f.superseded for f in findings):
        return []
    if not any(
        f.role == "victim" and f.kind in (Kind.TRACEBACK, Kind.EXCEPTION_LINE, Kind.NCCL) for f in findings
    ):
        return []
    return [f for f in findings if f.cause == FINISHED]


def finished_words(finished: Sequence[Finding]) -> str:
    """What :func:`finished_early`'s reports mean, in words."""
    first = finished[0]
    node = f"on {first.who}" if first.who else f"whose output is {first.source}"
    return (
        f"torchrun {node} reported its worker group finished (every rank there exited 0, line "
        f"{first.line}) while the ranks that failed waited for a peer: a rank of that node likely "
        "returned from its main before a collective the others were in (a save, an evaluation or a "
        "step that only some ranks run, or uneven data)"
    )
