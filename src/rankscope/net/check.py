"""`net check` across nodes: every node listens on the port and probes every node, this side builds the matrix.

Each node runs ``rankscope net probe --json --serve PORT --bind 0.0.0.0 --retry-refused ADDR:PORT...``
over the cluster fan-out (ssh, pdsh or srun, all nodes at once): it opens its listener, probes
every node (itself included) for ``window`` seconds, retrying a refusal while a peer's listener
may not be up yet, and keeps listening for :func:`hold_for` seconds so that late starters still find it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Optional

from rankscope.cluster.classify import NodeResult, last_line
from rankscope.cluster.run import ClusterTarget, run_remote
from rankscope.model import Stage
from rankscope.net.options import ProbeOptions
from rankscope.net.report import CheckReport, ProbeReport
from rankscope.net.verdicts import Cell, Matrix, ProbeResult, findings
from rankscope.serial import load_document

#: The remote shell's exit code when rankscope is missing (127) or not executable (126).
_NO_RANKSCOPE = {
    126: "rankscope is there but cannot run — check --remote-rankscope points to an executable",
    127: "rankscope not found — install it there, or pass --remote-rankscope PATH / --remote-setup",
}


#: How much longer than one window a node waits for peers that keep showing up (slow logins).
LATE_PEERS = 60.0


def hold_for(window: float) -> float:
    """The longest each node keeps its listener (and retries refused probes), from its start.

    A peer that starts later than this node by up to the window still finds the listener (and one
    that starts earlier retries its refused probes until it is up); a second more covers the connect.
    Each peer that shows up (its first connection, or a refused probe to it that opens) gives the
    missing ones another window, so logins spread over more than a window stretch it, up to
    :data:`LATE_PEERS` seconds more. When every peer is up, a node ends one window after the last
    one came (plus the second), not at this bound.
    """
    return window + 1.0 + LATE_PEERS


def node_options(port: int, addresses: Sequence[str], window: float) -> ProbeOptions:
    """What every node runs: listen on ``port`` everywhere, probe every address, answer in JSON."""
    targets = tuple(f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addresses)
    return ProbeOptions(
        targets,
        timeout=window,
        as_json=True,
        serve=port,
        bind="0.0.0.0",
        hold=hold_for(window),
        retry_refused=True,
    )


def node_argv(remote_rankscope: str, port: int, addresses: Sequence[str], window: float) -> list[str]:
    return [remote_rankscope, *node_options(port, addresses, window).to_argv()]


def parse_answer(stdout: str) -> Optional[ProbeReport]:
    try:
        return load_document(ProbeReport, json.loads(stdout.strip()))
    except ValueError:
        return None


def assemble(
    port: int,
    nodes: Sequence[str],
    address_of: Mapping[str, str],
    answers: Mapping[str, Optional[ProbeReport]],
    reasons: Mapping[str, str],
) -> CheckReport:
    """The matrix from every node's answer (pure). A node without an answer gets a row of ``None``."""
    cells: list[Cell] = []
    silent: dict[str, str] = {}
    listen_errors: dict[str, str] = {}
    for source in nodes:
        answer = answers.get(source)
        if answer is None:
            silent[source] = reasons.get(source, "no answer")
            cells += [Cell(source, target, None) for target in nodes]
            continue
        if answer.listen_error:
            listen_errors[source] = answer.listen_error
        by_host: dict[str, ProbeResult] = {r.host: r for r in answer.results}
        for target in nodes:
            result = by_host.get(address_of.get(target, target))
            cells.append(
                Cell(source, target, result.verdict if result else None, result.detail if result else "")
            )
    matrix = Matrix(port, list(nodes), cells, silent)
    return CheckReport(matrix, findings(matrix), listen_errors)


def check_cluster(
    target: ClusterTarget,
    port: int,
    window: float,
    addresses: Mapping[str, str],
    remote_rankscope: str = "rankscope",
    progress: Optional[Callable[[str], None]] = None,
) -> tuple[CheckReport, list[NodeResult]]:
    """Run the probes on every node of ``target`` and assemble the matrix.

    ``addresses`` maps a node name to the address its peers should probe (node names that are ssh
    aliases); the others are probed by name, as each node resolves it.
    """
    nodes = target.nodes()
    address_of = {node: addresses.get(node, node) for node in nodes}
    # Every node must listen while the others probe: all at once, and time for the login on top.
    target = replace(
        target,
        fanout=max(target.fanout, len(nodes)),
        node_timeout=max(target.node_timeout, hold_for(window) + 15.0),
    )
    argv = node_argv(remote_rankscope, port, [address_of[n] for n in nodes], window)
    results = run_remote(target, argv, progress)
    answers: dict[str, Optional[ProbeReport]] = {}
    reasons: dict[str, str] = {}
    for result in results:
        answer = parse_answer(result.stdout) if result.stage in (Stage.OK, Stage.COMMAND_FAILED) else None
        answers[result.node] = answer
        if answer is None and result.returncode in _NO_RANKSCOPE:
            reasons[result.node] = f"{Stage.NO_RANKSCOPE}: {_NO_RANKSCOPE[result.returncode]}"
        elif answer is None:
            detail = result.reason or last_line(result.stderr) or "no answer"
            reasons[result.node] = f"{result.stage}: {detail}"
    return assemble(port, nodes, address_of, answers, reasons), results
