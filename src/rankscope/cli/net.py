"""`rankscope net`: interfaces and what to name in *_SOCKET_IFNAME, port probes, reachability between nodes."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import click

from rankscope.cli.cluster_options import cluster_options, cluster_requested, cluster_target
from rankscope.cli.params import from_params
from rankscope.cli.pictures import HTML_OPTION, check_page_path
from rankscope.errors import BadInputError, ExitCode, RankscopeError
from rankscope.net.options import ProbeOptions
from rankscope.serial import dump_document

CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.group(
    "net",
    context_settings=CONTEXT,
    help="""Can the nodes talk? Interfaces, port probes and reachability between nodes.

\b
Examples:
  rankscope net ifaces                          # kinds, addresses, what to export
  rankscope net probe node02:29500 node03:29500 # open / refused / filtered / no name
  rankscope net listen 29500 --bind 0.0.0.0     # on node02, for a probe by hand
  rankscope net check --hosts node[01-16] --port 29500   # every pair, both ways
  rankscope net check --master                  # MASTER_ADDR:MASTER_PORT before a job
""",
)
def net() -> None:
    pass


def _outcome(total: int, good: int) -> int:
    if total and good == total:
        return int(ExitCode.OK)
    return int(ExitCode.PARTIAL if good else ExitCode.ALL_FAILED)


# --- ifaces ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IfacesRequest:
    peer: Optional[str] = None
    as_json: bool = False


@net.command(
    "ifaces",
    context_settings=CONTEXT,
    short_help="Interfaces, their kinds, and what to export as *_SOCKET_IFNAME.",
    help="""This node's interfaces, their kind, and which one multi-node jobs should name.

\b
Examples:
  rankscope net ifaces                    # table, recommendation, host-name warning
  rankscope net ifaces --peer node02      # the interface the route to node02 leaves by
  rankscope net ifaces --json

Kinds: Ethernet, InfiniBand, RoCE, EFA, OPA, loopback, docker, bridge, veth, bond, vlan,
tunnel, virtual (from /sys/class/net and /sys/class/infiniband). The recommendation
(NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, Open MPI btl_tcp_if_include) is the interface
the kernel routes to --peer through (default: $MASTER_ADDR), else the one with the default
route; never lo, docker or veth. Warns when this host's name resolves to 127.x.
""",
)
@click.option("--peer", metavar="HOST", help="Another node of the job (default: $MASTER_ADDR).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document (rankscope.net.ifaces/1).")
def ifaces_cmd(**params: Any) -> int:
    from rankscope.net.collect import ifaces_report
    from rankscope.net.render import render_ifaces
    from rankscope.net.report import IFACES_SCHEMA

    request = from_params(IfacesRequest, params)
    report = ifaces_report(request.peer)
    if request.as_json:
        click.echo(json.dumps(dump_document(IFACES_SCHEMA, report), indent=2))
    else:
        click.echo(render_ifaces(report), nl=False)
    return int(ExitCode.OK)


# --- listen ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListenRequest:
    port: int
    bind: str = "127.0.0.1"
    timeout: float = 300.0
    count: Optional[int] = None


@net.command(
    "listen",
    context_settings=CONTEXT,
    short_help="Listen on a port (127.0.0.1 unless --bind) for a probe by hand.",
    help="""Listen on PORT so that another node can probe it; accepts, prints and closes each connection.

\b
Examples:
  rankscope net listen 29500 --bind 0.0.0.0            # on node01, every address
  rankscope net probe node01:29500                      # then on node02
  rankscope net listen 0 --count 1 --timeout 30         # any free port, one probe

Listens on 127.0.0.1 unless --bind says otherwise, and never longer than --timeout.
Exit code: 0, or 5 when --count connections did not arrive in time.
""",
)
@click.argument("port", type=click.IntRange(0, 65535), metavar="PORT")
@click.option(
    "--bind",
    default="127.0.0.1",
    metavar="ADDR",
    show_default=True,
    help="Address to listen on (0.0.0.0: all).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1),
    metavar="SECONDS",
    default=300.0,
    show_default=True,
    help="Stop after this many seconds.",
)
@click.option("--count", type=click.IntRange(1), metavar="N", help="Stop after this many connections.")
def listen_cmd(**params: Any) -> int:
    from rankscope.net.probe import open_listener, serve

    request = from_params(ListenRequest, params)
    try:
        listener = open_listener(request.bind, request.port)
    except OSError as exc:
        raise RankscopeError(
            f"cannot listen on {request.bind}:{request.port}: {exc.strerror or exc}",
            "pick another port, or find who holds it: ss -ltnp",
            ExitCode.ALL_FAILED,
        ) from None
    with listener:
        address, port = listener.getsockname()[:2]
        click.echo(f"listening on {address}:{port} for {request.timeout:g}s")

        def seen(peer: str) -> None:
            click.echo(f"connection from {peer}")

        accepted = serve(listener, time.monotonic() + request.timeout, request.count, seen)
    click.echo(f"{accepted} connection(s); stopped")
    if request.count is not None and accepted < request.count:
        return int(ExitCode.ALL_FAILED)
    return int(ExitCode.OK)


# --- probe ----------------------------------------------------------------------------------


@net.command(
    "probe",
    context_settings=CONTEXT,
    short_help="Probe HOST:PORTs all at once: open, refused, filtered, no name.",
    help="""Connect to every HOST:PORT at once and say what answered: open, refused, filtered, no name, no route.

\b
Examples:
  rankscope net probe node02:29500
  rankscope net probe node0{2,3,4} --port 29500 --timeout 2
  rankscope net probe '[fd00::2]:29500' --json

refused: the host answered with a reset (nothing listens; the path is open).
filtered: no answer within --timeout (a firewall drops it, or the host is down).
All probes run in parallel, so N targets take one --timeout, not N.
--serve PORT also listens meanwhile (used by `net check` on each node).
Exit code: 0 all open, 4 some open, 5 none.
""",
)
@click.argument("targets", nargs=-1, required=True)
@click.option(
    "--port", type=click.IntRange(1, 65535), metavar="PORT", help="Port for targets given without one."
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.05),
    metavar="SECONDS",
    default=3.0,
    show_default=True,
    help="Seconds each probe may take (all run at once).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON document (rankscope.net.probe/1).")
@click.option(
    "--serve", type=click.IntRange(0, 65535), metavar="PORT", help="Also listen on this port meanwhile."
)
@click.option("--bind", default="127.0.0.1", metavar="ADDR", show_default=True, help="Address for --serve.")
@click.option(
    "--hold",
    type=click.FloatRange(0),
    metavar="SECONDS",
    default=0.0,
    help="Keep --serve listening this long from the start (with --retry-refused: at most this long).",
)
@click.option(
    "--retry-refused",
    is_flag=True,
    help="Retry a refused probe until --timeout (peers starting); each peer that shows up restarts it.",
)
def probe_cmd(**params: Any) -> int:
    from rankscope.net.collect import probe_report
    from rankscope.net.render import render_probes
    from rankscope.net.report import PROBE_SCHEMA
    from rankscope.net.verdicts import Verdict

    request = read_probe_options(params)
    report = probe_report(request)
    if request.as_json:
        click.echo(json.dumps(dump_document(PROBE_SCHEMA, report), indent=2))
    else:
        click.echo(render_probes(report.results), nl=False)
    opened = sum(1 for r in report.results if r.verdict is Verdict.OPEN)
    return _outcome(len(report.results), opened)


def read_probe_options(params: dict[str, Any]) -> ProbeOptions:
    return from_params(ProbeOptions, params)


# --- check ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckRequest:
    port: Optional[int] = None
    window: float = 5.0
    address: tuple[str, ...] = ()
    remote_rankscope: str = "rankscope"
    as_json: bool = False
    master: bool = False
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    nnodes: Optional[int] = None
    html: Optional[Path] = None


@net.command(
    "check",
    context_settings=CONTEXT,
    short_help="Port reachability between nodes as a matrix, or MASTER_ADDR.",
    help="""Reachability of a port between nodes, both ways, as a matrix; or MASTER_ADDR:MASTER_PORT before a job.

\b
Examples:
  rankscope net check --hosts node[01-16] --port 29500
  rankscope net check --hostfile hostfile --via ssh --port 6000 --window 3
  rankscope net check --jobid 2180718 --port 29500 --json
  rankscope net check --hosts a,b --address a=10.0.0.1 --address b=10.0.0.2 --port 6000
  rankscope net check --master                 # uses MASTER_ADDR, MASTER_PORT
  rankscope net check --master --master-addr node01 --master-port 29500 --nnodes 4
  rankscope net check --hosts node[01-64] --port 29500 --html net.html   # + the matrix as a heatmap

Across nodes: every node listens on PORT (all addresses, for --window + 1 seconds) and probes
every node at once, so the whole matrix costs about one window plus the login, whatever
the number of nodes. Logins spread over more than a window stretch it: each peer that shows
up gives the missing ones another window (up to a minute more).
Cells: open, refused (reset), FILTERED (no answer), NO-NAME, NO-ROUTE.
--master: MASTER_ADDR resolves, is not loopback on a multi-node job, and its port is free
(on the master) or reachable (elsewhere).
Exit code: 0 every link open / every check passed, 4 some links bad, 5 none open / a check failed.
""",
)
@cluster_options
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    help="Port to check between nodes (default $MASTER_PORT).",
)
@click.option(
    "--window",
    type=click.FloatRange(0.2),
    metavar="SECONDS",
    default=5.0,
    show_default=True,
    help="Seconds each node probes for.",
)
@click.option("--address", multiple=True, metavar="NODE=ADDR", help="Probe NODE at ADDR (repeatable).")
@click.option(
    "--remote-rankscope",
    metavar="PATH",
    default="rankscope",
    show_default=True,
    help="rankscope on the nodes.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON document (rankscope.net.check/1).")
@click.option("--master", is_flag=True, help="Check MASTER_ADDR:MASTER_PORT from here instead.")
@click.option("--master-addr", metavar="HOST", help="Instead of $MASTER_ADDR.")
@click.option("--master-port", type=click.IntRange(1, 65535), metavar="PORT", help="Instead of $MASTER_PORT.")
@click.option(
    "--nnodes",
    type=click.IntRange(1),
    metavar="N",
    help="Nodes in the job (default: from the launcher's environment).",
)
@HTML_OPTION
def check_cmd(**params: Any) -> int:
    request = from_params(CheckRequest, params)
    check_page_path(request.html)
    if request.master and request.html is not None:
        raise click.UsageError("--html draws the matrix between nodes; --master has none")
    if request.master:
        return _check_master(request)
    if not cluster_requested(params):
        raise BadInputError(
            "no nodes given", "pass --hosts NODESET, --hostfile FILE or --jobid J (or --master)"
        )
    from rankscope.net.collect import env_port, parse_addresses

    port = request.port or env_port(os.environ)
    if port is None:
        raise BadInputError("no port given", "pass --port PORT (or set MASTER_PORT)")
    addresses = parse_addresses(request.address)
    return _check_cluster(request, params, port, addresses)


def _check_cluster(
    request: CheckRequest, params: dict[str, Any], port: int, addresses: dict[str, str]
) -> int:
    from rankscope.cli.progress import tty_progress
    from rankscope.net.check import check_cluster
    from rankscope.net.render import render_matrix
    from rankscope.net.report import CHECK_SCHEMA
    from rankscope.net.verdicts import Verdict

    progress = tty_progress()
    try:
        report, _results = check_cluster(
            cluster_target(params), port, request.window, addresses, request.remote_rankscope, progress
        )
    finally:
        if progress is not None:
            progress.clear()
    if request.as_json:
        click.echo(json.dumps(dump_document(CHECK_SCHEMA, report), indent=2))
    else:
        click.echo(render_matrix(report, request.window), nl=False)
    if request.html is not None:
        from rankscope.cli.pictures import write_page
        from rankscope.pictures.net_page import net_page

        write_page(request.html, net_page(report, request.window))
    links = report.matrix.links()
    opened = sum(1 for c in links if c.verdict is Verdict.OPEN)
    if report.matrix.silent and opened:
        return int(ExitCode.PARTIAL)
    return _outcome(len(links), opened)


def _check_master(request: CheckRequest) -> int:
    from rankscope.net.master import gather_master, judge_master, multi_node
    from rankscope.net.render import render_master
    from rankscope.net.report import MASTER_SCHEMA, MasterReport

    addr = request.master_addr or os.environ.get("MASTER_ADDR", "")
    from rankscope.net.collect import env_port

    port = request.master_port or env_port(os.environ)
    facts = gather_master(addr, port, multi_node(os.environ, request.nnodes), request.window)
    checks = judge_master(facts)
    if request.as_json:
        document = dump_document(MASTER_SCHEMA, MasterReport(facts, checks))
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(render_master(checks), nl=False)
    return int(ExitCode.ALL_FAILED if any(c.level == "FAIL" for c in checks) else ExitCode.OK)
