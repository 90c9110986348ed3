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
from rankscope.folding import RankSet
from rankscope.logs.torchrun_summary import SUMMARY_SOURCE, RankExit

FINISHED = "workers_finished"
#: A local rank missing from its node's torchrun failure summary, which lists every worker that failed
#: or that it stopped: that worker had exited 0 before (torchrun reports no exit 0).
LEFT = "not_in_summary"
#: Looked for in blocks with lines no rank prefix names (the INFO line; the ``Local worker group finished
#: (WorkerState.SUCCEEDED)`` line comes with it); the exit barrier's error on the lines with ``Error``.
NEEDLE = b"worker group successfully finished"
BARRIER_NEEDLE = b"Error waiting on exit barrier"


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


def left_findings(exits: Sequence[RankExit]) -> list[Finding]:
    """The local ranks a node's failure summary leaves out, below its highest listed one (local ranks
    run from 0 without a gap): each exited 0 before torchrun saw a failure (a real 3-rank job whose
    rank 0 called sys.exit(0) before an all_reduce: the summary listed ranks 1 and 2 only). Its global
    rank where the node's listed entries agree on one offset; entries without a local rank say nothing."""
    out: list[Finding] = []
    hosts = sorted({e.host for e in exits})
    for host in hosts:
        mine = [e for e in exits if e.host == host]
        if any(e.local_rank is None for e in mine):
            continue
        listed = {e.local_rank for e in mine if e.local_rank is not None}
        offsets = {e.rank - (e.local_rank or 0) for e in mine}
        offset = offsets.pop() if len(offsets) == 1 else None
        for local in sorted(set(range(max(listed, default=-1) + 1)) - listed):
            rank = None if offset is None else offset + local
            who = f"rank {rank}" if rank is not None else f"local rank {local}"
            out.append(
                Finding(
                    Kind.LAUNCHER_SUMMARY,
                    LEFT,
                    HANDLED,
                    str(rank) if rank is not None else str(local),
                    f"torchrun's failure summary on {host} lists local ranks {RankSet.of(listed)} but not "
                    f"{local}: {who} had exited 0 before the failure (torchrun reports no exit 0)",
                    None,
                    SUMMARY_SOURCE,
                    0,
                    (1 << 62) + 2,
                    global_rank=rank,
                    local=rank is None,
                )
            )
    return out


def finished_early(findings: Sequence[Finding]) -> list[Finding]:
    """torchrun's reports of a node whose ranks all finished, where every error of the log is a
    consequence (no culprit) and some rank's error is a victim's; else none."""
    if any(f.role == "culprit" and not f.superseded for f in findings):
        return []
    if not any(
        f.role == "victim" and f.kind in (Kind.TRACEBACK, Kind.EXCEPTION_LINE, Kind.NCCL) for f in findings
    ):
        return []
    return [f for f in findings if f.cause in (LEFT, FINISHED)]


def finished_words(finished: Sequence[Finding]) -> str:
    """What :func:`finished_early`'s reports mean, in words."""
    left = [f for f in finished if f.cause == LEFT]
    if left:
        who = ", ".join(
            f"rank {f.global_rank}" if f.global_rank is not None else f"local rank {f.who}" for f in left
        )
        return (
            f"{who} {'is' if len(left) == 1 else 'are'} not in torchrun's failure summary, which lists every "
            "worker of its node that failed or that it stopped: "
            f"{'it' if len(left) == 1 else 'they'} had exited 0 while the others still ran, likely returning "
            "from main (or sys.exit) before a collective the others were in (a save, an evaluation or a step "
            "that only some ranks run, or uneven data)"
        )
    first = finished[0]
    node = f"on {first.who}" if first.who else f"whose output is {first.source}"
    return (
        f"torchrun {node} reported its worker group finished (every rank there exited 0, line "
        f"{first.line}) while the ranks that failed waited for a peer: a rank of that node likely "
        "returned from its main before a collective the others were in (a save, an evaluation or a "
        "step that only some ranks run, or uneven data)"
    )
