"""This node's side of `net ifaces` and `net probe`: the interfaces with the advice on them, and the
probes run at once with an optional listener beside them (what `net check` runs on every node)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Optional

from rankscope.errors import BadInputError
from rankscope.net.options import ProbeOptions
from rankscope.net.report import IfacesReport, MasterReport, ProbeReport


def ifaces_report(peer: Optional[str], root: str = "/") -> IfacesReport:
    """The interfaces under ``root``, which one to name for reaching ``peer`` (MASTER_ADDR when
    None), and what this host's name resolves to."""
    from rankscope.net.advice import hostname_findings, recommend
    from rankscope.net.ifaces import gather
    from rankscope.net.probe import hostname_addresses, source_address

    found = gather(root)
    peer = peer or os.environ.get("MASTER_ADDR") or None
    source = source_address(peer) if peer else None
    recommendation = recommend(found.interfaces, found.default_route, peer, source)
    host, resolved = hostname_addresses()
    return IfacesReport(
        host=host,
        interfaces=found.interfaces,
        rdma_only=found.rdma_only,
        default_route=found.default_route,
        recommendation=recommendation,
        hostname_resolves_to=resolved,
        findings=hostname_findings(host, resolved, recommendation),
    )


def probe_report(options: ProbeOptions) -> ProbeReport:
    """Every target probed at once; with ``serve``, a listener open meanwhile (its connections kept)."""
    from rankscope.net.probe import open_listener, parse_target, probe, serve

    started = time.monotonic()
    targets = [parse_target(t, options.port) for t in options.targets]
    listener: Optional[socket.socket] = None
    report = ProbeReport(host=socket.gethostname(), results=[])
    if options.serve is not None:
        try:
            listener = open_listener(options.bind, options.serve)
            report.listening = "{}:{}".format(*listener.getsockname()[:2])
        except OSError as exc:
            report.listen_error = exc.strerror or str(exc)
    try:
        latest = started + options.hold
        report.results = probe(
            targets, options.timeout, options.retry_refused, listener, report.accepted.append, latest
        )
        if listener is not None:
            # net check: a second past the window (which late peers may have stretched), never past --hold
            until = min(latest, time.monotonic() + 1.0) if options.retry_refused else latest
            serve(listener, until, on_accept=report.accepted.append)
    finally:
        if listener is not None:
            listener.close()
    return report


def env_port(environ: Mapping[str, str]) -> Optional[int]:
    """MASTER_PORT when it is a port number."""
    value = environ.get("MASTER_PORT", "")
    return int(value) if value.isdigit() and 0 < int(value) < 65536 else None


def check_port(port: Optional[int], environ: Mapping[str, str]) -> int:
    """The port `net check` checks between nodes: ``--port``, else MASTER_PORT; one error line otherwise."""
    port = port or env_port(environ)
    if port is None:
        raise BadInputError("no port given", "pass --port PORT (or set MASTER_PORT)")
    return port


def master_report(
    environ: Mapping[str, str],
    addr: Optional[str] = None,
    port: Optional[int] = None,
    nnodes: Optional[int] = None,
    timeout: float = 3.0,
) -> MasterReport:
    """`net check --master`: MASTER_ADDR:MASTER_PORT (or ``addr``, ``port``) looked at from here,
    within ``timeout`` seconds, and judged."""
    from rankscope.net.master import gather_master, judge_master, multi_node

    facts = gather_master(
        addr or environ.get("MASTER_ADDR", ""),
        port or env_port(environ),
        multi_node(environ, nnodes),
        timeout,
    )
    return MasterReport(facts, judge_master(facts))


def parse_addresses(items: Sequence[str]) -> dict[str, str]:
    """``--address NODE=ADDR`` values, by node."""
    addresses: dict[str, str] = {}
    for item in items:
        node, sep, address = item.partition("=")
        if not sep or not node or not address:
            raise BadInputError(f"not NODE=ADDR: {item!r}", "e.g. --address node01=10.0.0.1")
        addresses[node] = address
    return addresses
