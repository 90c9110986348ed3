"""What a port probe found, what it means, and the reachability matrix between nodes (pure).

A probe ends in one of five verdicts. The manual equivalents: ``nc -zv -w T host port`` prints
"succeeded" (open), "Connection refused" (refused), nothing until ``-w`` (filtered), "Name or
service not known" (does not resolve), "No route to host" (no route).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from rankscope.model import Words


class Verdict(Words):
    OPEN = "open"
    REFUSED = "refused"
    FILTERED = "filtered"
    UNRESOLVED = "name does not resolve"
    NO_ROUTE = "no route"
    ERROR = "error"


#: verdict -> (what it means, what to do). {host} and {port} are filled in.
MEANING: dict[Verdict, tuple[str, str]] = {
    Verdict.OPEN: ("something accepts connections on {host}:{port}", ""),
    Verdict.REFUSED: (
        "{host} answered with a reset: the host is up and the network lets the port through, "
        "but nothing listens on {port} (or a firewall REJECTs it)",
        "start the listener first (the job's rank 0, or `rankscope net listen {port} --bind 0.0.0.0` there)",
    ),
    Verdict.FILTERED: (
        "no answer at all from {host}:{port} within the timeout: a firewall drops the packets "
        "(or the host is down)",
        "open TCP port {port} inbound on {host} (`iptables -I INPUT -p tcp --dport {port} -j ACCEPT`, "
        "or your cloud's security group) and check the host is up",
    ),
    Verdict.UNRESOLVED: (
        "the name {host} does not resolve here",
        "fix DNS or /etc/hosts on the probing node, or use the address (`--address NODE=IP` with net check)",
    ),
    Verdict.NO_ROUTE: (
        "the kernel has no route to {host} (an unreachable or blackhole route, an ICMP unreachable, "
        "or a local firewall rule)",
        "check the address is on a network this node reaches (`ip route get ADDR`)",
    ),
    Verdict.ERROR: ("the probe of {host}:{port} failed", "see the detail"),
}


@dataclass(frozen=True)
class ProbeResult:
    host: str
    port: int
    verdict: Verdict
    #: The address connected to (empty when the name did not resolve).
    address: str = ""
    #: The error as the kernel or the resolver said it.
    detail: str = ""
    elapsed: float = field(default=0.0, metadata={"round": 3})

    @property
    def target(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def meaning(self) -> str:
        return MEANING[self.verdict][0].format(host=self.host, port=self.port)

    def fix(self) -> str:
        return MEANING[self.verdict][1].format(host=self.host, port=self.port)


@dataclass(frozen=True)
class Cell:
    """One directed link of the matrix: ``source`` probed ``target``."""

    source: str
    target: str
    verdict: Optional[Verdict]
    detail: str = ""


@dataclass
class Matrix:
    """Who reaches whom on one port. A source node that never answered has ``None`` verdicts."""

    port: int
    nodes: list[str]
    cells: list[Cell]
    #: Source nodes that could not run the probe, with the reason (ssh unreachable, ...).
    silent: dict[str, str] = field(default_factory=dict)

    def cell(self, source: str, target: str) -> Optional[Cell]:
        for cell in self.cells:
            if cell.source == source and cell.target == target:
                return cell
        return None

    def links(self) -> list[Cell]:
        """Probes between two different nodes that ran."""
        return [c for c in self.cells if c.source != c.target and c.verdict is not None]


@dataclass(frozen=True)
class LinkFinding:
    problem: str
    fix: str
    links: tuple[tuple[str, str], ...] = ()


def findings(matrix: Matrix) -> list[LinkFinding]:
    """The matrix in words: a node nobody reaches, a node that reaches nobody, then single bad links.

    A node named in a node-wide finding is not repeated link by link; a link that fails one way
    only says so (a one-way firewall rule).
    """
    port = matrix.port
    links = matrix.links()
    out: list[LinkFinding] = []
    explained: set[tuple[str, str]] = set()
    for node in matrix.nodes:
        incoming = [c for c in links if c.target == node]
        bad = [c for c in incoming if c.verdict is not Verdict.OPEN]
        verdicts = {c.verdict for c in bad}
        if incoming and len(bad) == len(incoming) and len(incoming) > 1 and len(verdicts) == 1:
            verdict = bad[0].verdict
            assert verdict is not None
            meaning, fix = MEANING[verdict]
            out.append(
                LinkFinding(
                    f"no node reaches {node}:{port} ({verdict}): " + meaning.format(host=node, port=port),
                    fix.format(host=node, port=port),
                    tuple((c.source, c.target) for c in bad),
                )
            )
            explained.update((c.source, c.target) for c in bad)
    for node in matrix.nodes:
        outgoing = [c for c in links if c.source == node and (c.source, c.target) not in explained]
        bad = [c for c in outgoing if c.verdict is not Verdict.OPEN]
        if len(outgoing) > 1 and len(bad) == len(outgoing):
            words = ", ".join(sorted({str(c.verdict) for c in bad}))
            out.append(
                LinkFinding(
                    f"{node} reaches no other node on port {port} ({words}): its outbound traffic is "
                    "blocked or it routes through the wrong interface",
                    f"on {node}: check the egress firewall (`iptables -L OUTPUT`) and "
                    "`ip route get PEER` (see `rankscope net ifaces`)",
                    tuple((c.source, c.target) for c in bad),
                )
            )
            explained.update((c.source, c.target) for c in bad)
    for cell in links:
        if cell.verdict is Verdict.OPEN or (cell.source, cell.target) in explained:
            continue
        back = matrix.cell(cell.target, cell.source)
        one_way = back is not None and back.verdict is Verdict.OPEN
        meaning, fix = MEANING[cell.verdict or Verdict.ERROR]
        problem = f"{cell.source} -> {cell.target}:{port} {cell.verdict}" + (
            f" (while {cell.target} -> {cell.source} is open: a one-way rule)" if one_way else ""
        )
        out.append(
            LinkFinding(
                problem + ": " + meaning.format(host=cell.target, port=port),
                fix.format(host=cell.target, port=port),
                ((cell.source, cell.target),),
            )
        )
    return out


def summary(results: Sequence[ProbeResult]) -> dict[str, int]:
    """Verdict -> count, in the verdicts' order."""
    counts = {str(v): 0 for v in Verdict}
    for result in results:
        counts[str(result.verdict)] += 1
    return {k: n for k, n in counts.items() if n}
