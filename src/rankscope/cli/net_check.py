"""`rankscope net check`: a port's reachability between nodes as a matrix, or MASTER_ADDR before a job."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import click

from rankscope.cli.cluster_options import cluster_options, cluster_requested, cluster_target
from rankscope.cli.outcome import open_exit_code
from rankscope.cli.params import from_params
from rankscope.cli.pictures import HTML_OPTION, check_page_path
from rankscope.errors import BadInputError, ExitCode
from rankscope.serial import dump_document

CONTEXT = {"help_option_names": ["-h", "--help"]}


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


@click.command(
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
    from rankscope.net.collect import check_port, parse_addresses

    port = check_port(request.port, os.environ)
    return _check_cluster(request, params, port, parse_addresses(request.address))


def _check_cluster(
    request: CheckRequest, params: dict[str, Any], port: int, addresses: dict[str, str]
) -> int:
    from rankscope.cli.progress import tty_progress
    from rankscope.net.check import check_cluster
    from rankscope.net.render import render_matrix
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
        click.echo(json.dumps(dump_document(report), indent=2))
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
    return open_exit_code(len(links), opened)


def _check_master(request: CheckRequest) -> int:
    from rankscope.net.collect import master_report
    from rankscope.net.render import render_master

    report = master_report(
        os.environ, request.master_addr, request.master_port, request.nnodes, request.window
    )
    if request.as_json:
        click.echo(json.dumps(dump_document(report), indent=2))
    else:
        click.echo(render_master(report.checks), nl=False)
    return int(ExitCode.ALL_FAILED if any(c.level == "FAIL" for c in report.checks) else ExitCode.OK)
