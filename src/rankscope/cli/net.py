"""`rankscope net`: interfaces and what to name in *_SOCKET_IFNAME, port probes, reachability between nodes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Optional

import click

from rankscope.cli.net_check import CONTEXT, check_cmd
from rankscope.cli.outcome import open_exit_code
from rankscope.cli.params import from_params
from rankscope.errors import ExitCode, RankscopeError
from rankscope.net.options import ProbeOptions
from rankscope.serial import dump_document


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

    request = from_params(IfacesRequest, params)
    report = ifaces_report(request.peer)
    if request.as_json:
        click.echo(json.dumps(dump_document(report), indent=2))
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
    from rankscope.net.verdicts import Verdict

    request = read_probe_options(params)
    report = probe_report(request)
    if request.as_json:
        click.echo(json.dumps(dump_document(report), indent=2))
    else:
        click.echo(render_probes(report.results), nl=False)
    opened = sum(1 for r in report.results if r.verdict is Verdict.OPEN)
    return open_exit_code(len(report.results), opened)


def read_probe_options(params: dict[str, Any]) -> ProbeOptions:
    return from_params(ProbeOptions, params)


net.add_command(check_cmd)
